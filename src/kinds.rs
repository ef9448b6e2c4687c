//! The registry of a config table tagged by `kind` (the loss, the defense): one line per unit
//! gives the TOML name, the enum variant serde reads it into and the unit's own type, which
//! implements the table's trait in its own file.

/// Declares `pub enum $Enum` (serde: internally tagged by `kind`, one newtype variant per unit)
/// with `KINDS` (the names, in registry order), `name()` and `unit()` (the variant as its trait
/// object), so that adding a unit is its file plus one line here (`#[cfg(test)]` before the
/// name: a unit only tests see).
macro_rules! kind_registry {
    (
        $(#[$enum_doc:meta])*
        pub enum $Enum:ident: dyn $Trait:ident {
            $( $(#[doc = $doc:literal])* $(#[cfg($cfg:meta)])? $name:literal => $Variant:ident($Ty:ty), )+
        }
    ) => {
        $(#[$enum_doc])*
        #[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
        #[serde(tag = "kind")]
        pub enum $Enum {
            $( $(#[doc = $doc])* $(#[cfg($cfg)])? #[serde(rename = $name)] $Variant($Ty), )+
        }

        impl $Enum {
            /// The values of `kind`, in registry order.
            pub const KINDS: &'static [&'static str] = &[$($(#[cfg($cfg)])? $name),+];

            /// The value of `kind`.
            pub fn name(&self) -> &'static str {
                match self {
                    $($(#[cfg($cfg)])? Self::$Variant(_) => $name,)+
                }
            }

            /// The unit behind the table.
            pub fn unit(&self) -> &dyn $Trait {
                match self {
                    $($(#[cfg($cfg)])? Self::$Variant(u) => u,)+
                }
            }
        }
    };
}

pub(crate) use kind_registry;
