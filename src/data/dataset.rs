//! A data set rdml reads: a unit in its own file, named by one line of the registry in
//! [`super::DatasetKind`] (the name `data.dataset` takes).

use super::request::DataRequest;
use super::set::{EvalSet, Splits};
use anyhow::Result;

pub trait Dataset: Sync {
    /// The train and test splits.
    fn load(&self, r: &DataRequest) -> Result<Splits>;
    /// The test side alone, when the data set can read it without its training files (`None`:
    /// [`load`](Self::load)'s test split).
    fn load_test(&self, _r: &DataRequest) -> Option<Result<EvalSet>> {
        None
    }
    /// Whether its items are image files (resized, cropped; `data.train_crop` applies).
    fn image_files(&self) -> bool {
        false
    }
}

/// Declares `pub enum DatasetKind` (serde: each unit's name) with `name()`, `unit()` and `all()`,
/// so that a data set is its file plus one line: `"name" => Variant(path::Unit),`.
macro_rules! dataset_registry {
    (
        $(#[$enum_doc:meta])*
        pub enum $Enum:ident {
            $( $(#[cfg($cfg:meta)])? $name:literal => $Variant:ident($unit:path), )+
        }
    ) => {
        $(#[$enum_doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        pub enum $Enum {
            $( $(#[cfg($cfg)])? #[serde(rename = $name)] $Variant, )+
        }

        impl $Enum {
            /// The value of `data.dataset`.
            pub fn name(self) -> &'static str {
                match self {
                    $( $(#[cfg($cfg)])? Self::$Variant => $name, )+
                }
            }

            /// The data set's loader.
            pub fn unit(self) -> &'static dyn $crate::data::dataset::Dataset {
                match self {
                    $( $(#[cfg($cfg)])? Self::$Variant => &$unit, )+
                }
            }

            /// Every data set, in registry order.
            #[allow(clippy::vec_init_then_push)]
            pub fn all() -> Vec<Self> {
                let mut all = Vec::new();
                $( $(#[cfg($cfg)])? all.push(Self::$Variant); )+
                all
            }
        }
    };
}

pub(crate) use dataset_registry;
