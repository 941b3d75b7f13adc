//! A configuration from layers, as the kubelet builds its own: the node's kubelet
//! configuration (its `--config` file, or a configz answer saved to a file) and an overlay laid
//! over it by the kubelet's drop-in rules (`--config-dir`): the base defaulted first (an absent
//! `evictionHard` becomes the kubelet's defaults), then the overlay applied as a JSON merge
//! patch (RFC 7386): maps merged key by key, lists and scalars replaced, `null` removing a key.
//! So an overlay holding `evictionHard: {memory.available: 200Mi}` moves that one threshold and
//! keeps the kubelet's others.
use std::fmt;

use serde::Deserialize;
use serde_norway::{Mapping, Value};

use super::known_fields::{AGENT_FIELD, KUBELET_FIELDS};
use super::{
    ConfigError, ConfigForm, DEFAULT_EVICTION_HARD, DocumentKind, EvictionConfig,
    KUBELET_API_VERSION, KUBELET_CONFIGURATION, KubeletConfigFile, MAX_CONFIG_BYTES, Written,
    configz_body,
};
use crate::yaml_bounds;

/// One configuration text, checked as the kubelet's decoder checks a file (or taken as a
/// configz answer), its KubeletConfiguration picked.
#[derive(Debug, Clone)]
pub struct ConfigLayer {
    text: String,
    form: ConfigForm,
    /// The KubeletConfiguration object (a configz answer's `kubeletconfig`).
    body: Value,
    /// Which of the text's YAML documents it is, counting empty ones, from 0.
    document_index: usize,
    unknown_fields: Vec<UnknownField>,
}

/// A top-level field the kubelet's v1beta1 KubeletConfiguration does not have: ignored, as
/// the kubelet's lenient decoding ignores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownField {
    /// The document's position in the file, from 1, counting documents that are not empty.
    pub(crate) document: usize,
    /// The field as written.
    pub(crate) field: String,
}

impl fmt::Display for UnknownField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "document {} ({KUBELET_CONFIGURATION}): unknown field {:?}, ignored (the kubelet \
             warns likewise: strict decoding error: unknown field {:?})",
            self.document,
            crate::printable::printable(&self.field),
            crate::printable::printable(&self.field),
        )
    }
}

impl ConfigLayer {
    /// Checks `text` as the kubelet decodes its `--config` (every document with `kind` and
    /// `apiVersion`, one KubeletConfiguration of v1beta1) or takes it as a configz answer;
    /// bounded before it is parsed.
    pub fn parse(text: &str) -> Result<ConfigLayer, ConfigError> {
        if text.len() as u64 > MAX_CONFIG_BYTES {
            return Err(ConfigError::TooLarge);
        }
        yaml_bounds::check(text, yaml_bounds::LIMITS).map_err(ConfigError::Unbounded)?;
        let yaml_error = |err: serde_norway::Error| ConfigError::Yaml(err.to_string());
        // (index among all documents, the document) for those that are not empty.
        let mut documents = Vec::new();
        for (index, document) in serde_norway::Deserializer::from_str(text).enumerate() {
            let value = Value::deserialize(document).map_err(yaml_error)?;
            if !value.is_null() {
                documents.push((index, value));
            }
        }
        if let [(index, single)] = documents.as_slice()
            && let Some(inner) = configz_body(single)
        {
            check_configz(inner)?;
            return Ok(ConfigLayer {
                text: text.to_string(),
                form: ConfigForm::Configz,
                body: inner.clone(),
                document_index: *index,
                unknown_fields: Vec::new(),
            });
        }
        if documents.is_empty() {
            return Err(ConfigError::Empty);
        }
        let mut chosen = None;
        let mut other_kinds = Vec::new();
        for (position, (index, document)) in documents.iter().enumerate() {
            let header = DocumentKind::deserialize(document).map_err(yaml_error)?;
            let (kind, version) = match (header.kind, header.api_version) {
                (Some(kind), Some(version)) => (kind, version),
                (kind, version) => {
                    return Err(ConfigError::MissingTypeMeta {
                        document: position + 1,
                        missing: match (kind, version) {
                            (None, Some(_)) => "kind",
                            (Some(_), None) => "apiVersion",
                            _ => "kind and apiVersion",
                        },
                    });
                }
            };
            if kind != KUBELET_CONFIGURATION {
                other_kinds.push(kind);
                continue;
            }
            if version != KUBELET_API_VERSION {
                return Err(ConfigError::UnknownVersion(version));
            }
            if chosen.is_some() {
                return Err(ConfigError::SeveralConfigurations);
            }
            chosen = Some((position + 1, *index, document));
        }
        let Some((position, index, body)) = chosen else {
            return Err(ConfigError::NoKubeletConfiguration { kinds: other_kinds });
        };
        let unknown_fields = body
            .as_mapping()
            .into_iter()
            .flat_map(Mapping::keys)
            .map(|key| match key {
                Value::String(name) => name.clone(),
                other => serde_norway::to_string(other)
                    .unwrap_or_default()
                    .trim()
                    .to_string(),
            })
            .filter(|name| name != AGENT_FIELD && !KUBELET_FIELDS.contains(&name.as_str()))
            .map(|field| UnknownField {
                document: position,
                field,
            })
            .collect();
        Ok(ConfigLayer {
            text: text.to_string(),
            form: ConfigForm::Document,
            body: body.clone(),
            document_index: index,
            unknown_fields,
        })
    }

    /// A document of the kubelet's, or a configz answer.
    pub fn form(&self) -> ConfigForm {
        self.form
    }

    /// The fields the kubelet does not know, ignored.
    pub fn unknown_fields(&self) -> &[UnknownField] {
        &self.unknown_fields
    }

    /// The agent's fields of this layer, read from the text so a wrong shape is reported
    /// with its line. An overlay's `null`s (which remove a key) are left out.
    fn file(&self) -> Result<KubeletConfigFile, ConfigError> {
        let yaml_error = |err: serde_norway::Error| ConfigError::Yaml(err.to_string());
        if self.form == ConfigForm::Configz {
            return KubeletConfigFile::deserialize(&self.defaulted(false)).map_err(yaml_error);
        }
        let from_text = serde_norway::Deserializer::from_str(&self.text)
            .nth(self.document_index)
            .map(KubeletConfigFile::deserialize)
            .transpose()
            .map(Option::unwrap_or_default);
        from_text.or_else(|error| {
            let mut body = Value::Mapping(Mapping::new());
            merge_patch(&mut body, &self.body);
            KubeletConfigFile::deserialize(&body).map_err(|_| yaml_error(error))
        })
    }

    /// The body as the kubelet holds it before a drop-in is merged: a file's absent
    /// `evictionHard` is the kubelet's defaults (when an overlay follows; alone, the
    /// defaulting in `kubelet_fields` does the same). A configz answer is already defaulted,
    /// and its JSON omits empty maps and lists: an absent `evictionHard` or
    /// `enforceNodeAllocatable` is an empty one, and `mergeDefaultEvictionSettings` was
    /// applied.
    fn defaulted(&self, before_overlay: bool) -> Value {
        let mut body = self.body.clone();
        let Value::Mapping(map) = &mut body else {
            return body;
        };
        let absent = |map: &Mapping, key: &str| map.get(key).is_none_or(Value::is_null);
        match self.form {
            ConfigForm::Configz => {
                for (key, empty) in [
                    ("evictionHard", Value::Mapping(Mapping::new())),
                    ("enforceNodeAllocatable", Value::Sequence(Vec::new())),
                ] {
                    if absent(map, key) {
                        map.insert(key.into(), empty);
                    }
                }
                map.remove("mergeDefaultEvictionSettings");
            }
            ConfigForm::Document if before_overlay && absent(map, "evictionHard") => {
                let defaults = DEFAULT_EVICTION_HARD
                    .iter()
                    .map(|(signal, value)| (signal.as_str().into(), (*value).into()))
                    .collect();
                map.insert("evictionHard".into(), Value::Mapping(defaults));
            }
            ConfigForm::Document => {}
        }
        body
    }

    /// The settings this layer writes, named as `config_origin` names them: a map's keys
    /// under its field (`evictionHard.memory.available`, `monitor.evictionInterval`), other
    /// fields by their name.
    fn setting_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        for (key, value) in self.body.as_mapping().into_iter().flatten() {
            let Some(key) = key.as_str() else { continue };
            if key == "kind" || key == "apiVersion" {
                continue;
            }
            match value.as_mapping() {
                Some(map) => names.extend(
                    map.keys()
                        .filter_map(Value::as_str)
                        .map(|sub| format!("{key}.{sub}")),
                ),
                None => names.push(key.to_string()),
            }
        }
        names
    }
}

/// A configz answer's `kubeletconfig`: an object of kind KubeletConfiguration, when it says.
fn check_configz(inner: &Value) -> Result<(), ConfigError> {
    if !inner.is_mapping() {
        return Err(ConfigError::BadConfigz("is not an object".into()));
    }
    let header =
        DocumentKind::deserialize(inner).map_err(|err| ConfigError::BadConfigz(err.to_string()))?;
    if let Some(kind) = header.kind.filter(|kind| kind != KUBELET_CONFIGURATION) {
        return Err(ConfigError::BadConfigz(format!(
            "is of kind {kind:?}, not {KUBELET_CONFIGURATION}"
        )));
    }
    if let Some(version) = header.api_version.filter(|v| v != KUBELET_API_VERSION) {
        return Err(ConfigError::UnknownVersion(version));
    }
    Ok(())
}

impl EvictionConfig {
    /// The configuration `base` gives, with `overlay` laid over it by the kubelet's drop-in
    /// rules; with what each wrote itself, the overlay's settings named in
    /// [`Written::overridden`].
    pub fn from_layers(
        base: &ConfigLayer,
        overlay: Option<&ConfigLayer>,
    ) -> Result<(EvictionConfig, Written), ConfigError> {
        let Some(overlay) = overlay else {
            if base.form == ConfigForm::Document {
                return EvictionConfig::from_yaml_explained(&base.text);
            }
            let file = base.file()?;
            let written = file.written();
            return Ok((file.into_config()?, written));
        };
        if overlay.form == ConfigForm::Configz {
            return Err(ConfigError::ConfigzOverlay);
        }
        let base_written = base.file()?.written();
        let overlay_written = overlay.file()?.written();
        let mut merged = base.defaulted(true);
        merge_patch(&mut merged, &overlay.body);
        let file = KubeletConfigFile::deserialize(&merged)
            .map_err(|err| ConfigError::Yaml(err.to_string()))?;
        let written = base_written.overlaid(overlay_written, overlay.setting_names());
        Ok((file.into_config()?, written))
    }
}

impl Written {
    /// What two layers wrote together: `over`'s own settings named in `overridden`.
    fn overlaid(self, over: Written, overridden: Vec<String>) -> Written {
        let union = |mut a: Vec<String>, b: Vec<String>| {
            for name in b {
                if !a.contains(&name) {
                    a.push(name);
                }
            }
            a
        };
        Written {
            eviction_hard: match (self.eviction_hard, over.eviction_hard) {
                (None, None) => None,
                (a, b) => Some(union(a.unwrap_or_default(), b.unwrap_or_default())),
            },
            merge_default_eviction_settings: self.merge_default_eviction_settings
                || over.merge_default_eviction_settings,
            eviction_minimum_reclaim: union(
                self.eviction_minimum_reclaim,
                over.eviction_minimum_reclaim,
            ),
            eviction_max_pod_grace_period: self.eviction_max_pod_grace_period
                || over.eviction_max_pod_grace_period,
            eviction_pressure_transition_period: over
                .eviction_pressure_transition_period
                .or(self.eviction_pressure_transition_period),
            eviction_interval: self.eviction_interval || over.eviction_interval,
            pod_cleanup_timeout: self.pod_cleanup_timeout || over.pod_cleanup_timeout,
            overridden,
        }
    }
}

/// RFC 7386: `patch`'s maps merged into `target` key by key, a `null` removing the key,
/// anything else replacing what was there. Its depth is the YAML's, bounded before parsing.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Mapping(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_mapping() {
        *target = Value::Mapping(Mapping::new());
    }
    let Value::Mapping(target) = target else {
        return;
    };
    for (key, value) in patch {
        if value.is_null() {
            target.remove(key);
        } else {
            merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

#[cfg(test)]
mod tests;
