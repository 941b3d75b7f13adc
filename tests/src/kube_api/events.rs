//! The mock's core/v1 Events, kept as the API server keeps them, listed and watched: by name, each created once
//! (a second create of a name is 409 AlreadyExists) and patched in place by a strategic merge
//! patch of its top-level fields (`count`, `lastTimestamp`, `message`), which is how the
//! kubelet's recorder counts a repeated Event; a patch of an unknown Event is 404.
use serde_json::Value;

use super::{api_objects::status_json, http_wire::Request};

/// The Events in the order they were first created, as they stand now.
#[derive(Default)]
pub(super) struct Events {
    stored: Vec<Value>,
    version: u64,
}

impl Events {
    pub(super) fn all(&self) -> Vec<Value> {
        self.stored.clone()
    }

    /// Stores an Event as another component (the kubelet) would have created it.
    pub(super) fn insert(&mut self, mut event: Value) {
        self.version += 1;
        event["metadata"]["resourceVersion"] = Value::String(self.version.to_string());
        self.stored.push(event);
    }

    /// `GET /api/v1/events`: every Event (the field selector is recorded, not applied).
    pub(super) fn list_json(&self) -> String {
        let items: Vec<String> = self.stored.iter().map(Value::to_string).collect();
        format!(
            r#"{{"kind":"EventList","apiVersion":"v1","metadata":{{"resourceVersion":"{}"}},"items":[{}]}}"#,
            self.version,
            items.join(",")
        )
    }

    /// The watch lines of the Events created or patched after `version`, and the version
    /// they bring the watch to.
    pub(super) fn lines_after(&self, version: u64) -> (String, u64) {
        let lines = self
            .stored
            .iter()
            .filter(|e| {
                e["metadata"]["resourceVersion"]
                    .as_str()
                    .and_then(|v| v.parse::<u64>().ok())
                    .is_some_and(|v| v > version)
            })
            .map(|e| format!("{{\"type\":\"ADDED\",\"object\":{e}}}\n"))
            .collect();
        (lines, self.version)
    }

    /// `POST .../events`: the status and body to answer with.
    pub(super) fn create(&mut self, request: &Request) -> (u16, String) {
        let mut event: Value = match serde_json::from_str(&request.body) {
            Ok(event) => event,
            Err(e) => return bad_request(&format!("not JSON: {e}")),
        };
        let Some(name) = event["metadata"]["name"].as_str().map(String::from) else {
            return bad_request("an Event without metadata.name");
        };
        if self.find(&name).is_some() {
            let message = format!("events {name} already exists");
            return (409, status_json(409, "AlreadyExists", &message, ""));
        }
        self.version += 1;
        event["metadata"]["resourceVersion"] = Value::String(self.version.to_string());
        let body = event.to_string();
        self.stored.push(event);
        (201, body)
    }

    /// `PATCH .../events/{name}` with a strategic merge patch.
    pub(super) fn patch(&mut self, request: &Request, name: &str) -> (u16, String) {
        if !request.content_type.contains("strategic-merge-patch") {
            return bad_request("expected a strategic merge patch");
        }
        let patch: Value = match serde_json::from_str(&request.body) {
            Ok(Value::Object(patch)) => Value::Object(patch),
            _ => return bad_request("a patch is a JSON object"),
        };
        self.version += 1;
        let version = self.version;
        let Some(event) = self.find(name) else {
            let message = format!("events {name} not found");
            return (404, status_json(404, "NotFound", &message, ""));
        };
        if let (Some(into), Some(from)) = (event.as_object_mut(), patch.as_object()) {
            for (field, value) in from {
                if field != "metadata" {
                    into.insert(field.clone(), value.clone());
                }
            }
        }
        event["metadata"]["resourceVersion"] = Value::String(version.to_string());
        (200, event.to_string())
    }

    fn find(&mut self, name: &str) -> Option<&mut Value> {
        self.stored
            .iter_mut()
            .find(|e| e["metadata"]["name"].as_str() == Some(name))
    }
}

fn bad_request(message: &str) -> (u16, String) {
    (400, status_json(400, "BadRequest", message, ""))
}
