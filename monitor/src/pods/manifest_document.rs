//! One YAML document of a manifest file, read so that a list's items are turned into pods
//! one at a time as the parser reaches them: the parsed tree of a whole 1,000-pod list
//! (about 12 KiB a pod) is never held at once, only the text and what the caller keeps.
//!
//! A list's `kind` may come after its `items` (`kubectl -o json` sorts the keys), so each
//! item is taken as it comes and the verdict on the document is given at its end, as
//! [`Verdict`]; the caller drops what it kept of the items when the verdict is not a list.
use std::fmt;

use k8s_openapi::api::core::v1::Pod;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// What one document turned out to be.
pub(super) enum Verdict<T> {
    /// Empty (after a trailing `---`).
    Empty,
    /// A document whose `kind` is not a string or absent (`None`), with the whole object.
    Object {
        kind: Option<String>,
        object: Map<String, Value>,
        items: Items<T>,
    },
    /// Not an object at all.
    NotAnObject,
}

/// A document's `items`, each kept by the caller's `keep` as it was read.
pub(super) struct Items<T> {
    pub(super) kept: Vec<T>,
    /// The first item in the way of a list of pods, with its position: an item whose kind
    /// is another than Pod, or one that is not a valid Pod.
    pub(super) first_problem: Option<(usize, ItemProblem)>,
    /// The position of the first item without a kind (a PodList's may leave it out; a
    /// generic List's may not).
    pub(super) first_without_kind: Option<usize>,
    /// `items` was something other than a list or null.
    pub(super) not_a_list: bool,
}

impl<T> Default for Items<T> {
    fn default() -> Self {
        Self {
            kept: Vec::new(),
            first_problem: None,
            first_without_kind: None,
            not_a_list: false,
        }
    }
}

pub(super) enum ItemProblem {
    /// The item's kind, which is not Pod.
    Kind(String),
    /// Why it is not a valid Pod.
    NotAPod(String),
}

/// Reads one document; `keep` takes each item that is a Pod.
pub(super) struct DocumentSeed<'k, T> {
    pub(super) keep: &'k mut dyn FnMut(Pod) -> T,
}

impl<'de, T> DeserializeSeed<'de> for DocumentSeed<'_, T> {
    type Value = Verdict<T>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Verdict<T>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de, T> Visitor<'de> for DocumentSeed<'_, T> {
    type Value = Verdict<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Verdict<T>, E> {
        Ok(Verdict::Empty)
    }

    fn visit_none<E: de::Error>(self) -> Result<Verdict<T>, E> {
        Ok(Verdict::Empty)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Verdict<T>, E> {
        Ok(Verdict::NotAnObject)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Verdict<T>, E> {
        Ok(Verdict::NotAnObject)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Verdict<T>, E> {
        Ok(Verdict::NotAnObject)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Verdict<T>, E> {
        Ok(Verdict::NotAnObject)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Verdict<T>, E> {
        Ok(Verdict::NotAnObject)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Verdict<T>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Verdict::NotAnObject)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Verdict<T>, A::Error> {
        let mut object = Map::new();
        let mut items = Items::default();
        while let Some(key) = map.next_key::<String>()? {
            if key == "items" {
                // A later `items` replaces an earlier one, as in a parsed tree.
                items = map.next_value_seed(ItemsSeed {
                    keep: &mut *self.keep,
                })?;
            } else {
                let value = map.next_value::<Value>()?;
                object.insert(key, value);
            }
        }
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .map(str::to_owned);
        Ok(Verdict::Object {
            kind,
            object,
            items,
        })
    }
}

struct ItemsSeed<'k, T> {
    keep: &'k mut dyn FnMut(Pod) -> T,
}

impl<'de, T> DeserializeSeed<'de> for ItemsSeed<'_, T> {
    type Value = Items<T>;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Items<T>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<T> ItemsSeed<'_, T> {
    fn other<E: de::Error>(self) -> Result<Items<T>, E> {
        Ok(Items {
            not_a_list: true,
            ..Items::default()
        })
    }
}

impl<'de, T> Visitor<'de> for ItemsSeed<'_, T> {
    type Value = Items<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of objects")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Items<T>, E> {
        Ok(Items::default())
    }

    fn visit_none<E: de::Error>(self) -> Result<Items<T>, E> {
        Ok(Items::default())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Items<T>, E> {
        self.other()
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Items<T>, E> {
        self.other()
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Items<T>, E> {
        self.other()
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Items<T>, E> {
        self.other()
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Items<T>, E> {
        self.other()
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Items<T>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        self.other()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Items<T>, A::Error> {
        let mut items = Items::default();
        let mut position = 0;
        // Past the first problem the document is refused whatever follows: the rest is
        // only parsed, so its syntax errors still count.
        while items.first_problem.is_none() {
            let Some(item) = seq.next_element::<Value>()? else {
                return Ok(items);
            };
            match item.get("kind").and_then(Value::as_str) {
                Some("Pod") => {}
                Some(kind) => {
                    items.first_problem = Some((position, ItemProblem::Kind(kind.to_owned())));
                    continue;
                }
                None => {
                    items.first_without_kind.get_or_insert(position);
                    // An item whose kind is not a string is "without kind" as well.
                }
            }
            match serde_json::from_value::<Pod>(item) {
                Ok(pod) => items.kept.push((self.keep)(pod)),
                Err(e) => {
                    items.first_problem = Some((position, ItemProblem::NotAPod(e.to_string())));
                }
            }
            position += 1;
        }
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(items)
    }
}
