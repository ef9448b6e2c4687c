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
        #[derive(Debug, Clone, serde::Serialize, PartialEq)]
        #[serde(tag = "kind")]
        pub enum $Enum {
            $( $(#[doc = $doc])* $(#[cfg($cfg)])? #[serde(rename = $name)] $Variant($Ty), )+
        }

        /// Read by `kind` first, then the unit's own type, so that an error names the key inside
        /// the table (`eps: a value of the wrong kind`), where serde's tagged enum names only the
        /// table.
        impl<'de> serde::Deserialize<'de> for $Enum {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let (kind, table) = $crate::kinds::tagged::<D>(d)?;
                match kind.as_str() {
                    $( $(#[cfg($cfg)])? $name => $crate::kinds::unit::<D, $Ty>(table).map(Self::$Variant), )+
                    other => Err(<D::Error as serde::de::Error>::unknown_variant(other, Self::KINDS)),
                }
            }
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

/// A table's `kind` and its other keys (a JSON `null` left out, as a key not given: a run's
/// record writes an unset option so).
pub(crate) fn tagged<'de, D: serde::Deserializer<'de>>(d: D) -> Result<(String, toml::Table), D::Error> {
    use serde::de::Error;
    let Some(toml::Value::Table(mut table)) = d.deserialize_any(Buffered)? else {
        return Err(D::Error::custom(
            "a value of the wrong kind, where a table with a kind was expected",
        ));
    };
    match table.remove("kind") {
        Some(toml::Value::String(k)) => Ok((k, table)),
        Some(other) => Err(D::Error::custom(format!(
            "kind: {} {}, where a string naming the kind was expected",
            if other.type_str().starts_with(['a', 'i']) {
                "an"
            } else {
                "a"
            },
            other.type_str()
        ))),
        None => Err(D::Error::missing_field("kind")),
    }
}

/// Any value of the table as toml holds it (NaN and infinities kept), `null` as nothing.
struct Buffered;

impl<'de> serde::de::Visitor<'de> for Buffered {
    type Value = Option<toml::Value>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a value")
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(Buffered)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Some(toml::Value::Boolean(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Some(toml::Value::Integer(v)))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
        i64::try_from(v)
            .map(|v| Some(toml::Value::Integer(v)))
            .map_err(|_| E::custom(format!("{v} is too large")))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Some(toml::Value::Float(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(toml::Value::String(v.to_string())))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
        let mut items = vec![];
        while let Some(v) = a.next_element_seed(Seed)? {
            items.extend(v);
        }
        Ok(Some(toml::Value::Array(items)))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
        let mut table = toml::Table::new();
        while let Some(k) = a.next_key::<String>()? {
            if let Some(v) = a.next_value_seed(Seed)? {
                table.insert(k, v);
            }
        }
        Ok(Some(toml::Value::Table(table)))
    }
}

/// [`Buffered`] as a seed, for the values inside a table or an array.
struct Seed;

impl<'de> serde::de::DeserializeSeed<'de> for Seed {
    type Value = Option<toml::Value>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(Buffered)
    }
}

/// The unit's own type from the table's other keys, an error naming the key it is in.
pub(crate) fn unit<'de, D: serde::Deserializer<'de>, T: serde::de::DeserializeOwned>(
    table: toml::Table,
) -> Result<T, D::Error> {
    use serde::de::Error;
    serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().message().to_string();
        // A key that is not one names itself.
        match path.as_str() {
            _ if message.starts_with("unknown field") => D::Error::custom(message),
            "." => D::Error::custom(message),
            key => D::Error::custom(format!("{key}: {message}")),
        }
    })
}
