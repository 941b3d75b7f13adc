//! The MOCK API server's TokenReview and SubjectAccessReview, as the agent's
//! `--metrics-auth kube` asks them: the tokens the test gave a user are authenticated (with
//! the groups of a service account), any other is not; a user may `get` the non-resource
//! paths the test granted it, nothing else.
use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::MockKubeApi;

/// Who holds which token, and who may get which path.
#[derive(Default)]
pub(super) struct Reviews {
    users: BTreeMap<String, String>,
    grants: BTreeSet<(String, String)>,
}

impl Reviews {
    /// The TokenReview answered for a request's body.
    pub(super) fn token_review(&self, body: &str) -> String {
        let review: Value = serde_json::from_str(body).unwrap_or_default();
        let token = review["spec"]["token"].as_str().unwrap_or_default();
        let status = match self.users.get(token) {
            Some(user) => json!({
                "authenticated": true,
                "user": {
                    "username": user,
                    "uid": format!("uid-of-{user}"),
                    "groups": ["system:serviceaccounts", "system:authenticated"],
                },
            }),
            None => json!({"user": {}, "error": "invalid bearer token"}),
        };
        json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "metadata": {},
            "spec": review["spec"],
            "status": status,
        })
        .to_string()
    }

    /// The SubjectAccessReview answered for a request's body: allowed for a `get` of a
    /// granted non-resource path by its user.
    pub(super) fn access_review(&self, body: &str) -> String {
        let review: Value = serde_json::from_str(body).unwrap_or_default();
        let spec = &review["spec"];
        let user = spec["user"].as_str().unwrap_or_default();
        let attributes = &spec["nonResourceAttributes"];
        let allowed = attributes["verb"] == "get"
            && attributes["path"]
                .as_str()
                .is_some_and(|path| self.grants.contains(&(user.to_string(), path.to_string())));
        let status = if allowed {
            json!({"allowed": true, "reason": "granted by the test"})
        } else {
            json!({"allowed": false})
        };
        json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "metadata": {},
            "spec": spec,
            "status": status,
        })
        .to_string()
    }
}

impl MockKubeApi {
    /// Authenticates `token` as `user` from now on.
    pub fn accept_token(&self, token: &str, user: &str) {
        self.shared
            .lock()
            .reviews
            .users
            .insert(token.to_string(), user.to_string());
    }

    /// Lets `user` get the non-resource URL `path` from now on.
    pub fn grant_get(&self, user: &str, path: &str) {
        self.shared
            .lock()
            .reviews
            .grants
            .insert((user.to_string(), path.to_string()));
    }

    /// The TokenReviews asked so far.
    pub fn token_reviews(&self) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.method == "POST" && r.path().ends_with("/tokenreviews"))
            .count()
    }
}
