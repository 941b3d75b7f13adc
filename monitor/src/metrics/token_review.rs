//! The API server's answers for [`super::token_gate`]: a TokenReview (who holds the token)
//! and a SubjectAccessReview (may that user `get` the path as a non-resource URL), the two
//! calls kube-rbac-proxy makes. RBAC: create on `tokenreviews.authentication.k8s.io` and
//! `subjectaccessreviews.authorization.k8s.io`.
use k8s_openapi::api::{
    authentication::v1::{TokenReview, TokenReviewSpec},
    authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec},
};
use kube::{Api, Client, api::PostParams};

use super::token_gate::{Reviewer, User};

/// Reviews through the agent's API client.
pub(crate) struct KubeReviewer {
    pub client: Client,
}

impl Reviewer for KubeReviewer {
    async fn authenticate(&self, token: &str) -> Result<Option<User>, String> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| failed("TokenReview", "tokenreviews.authentication.k8s.io", &e))?;
        let status = answer.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            return Ok(None);
        }
        let user = status.user.unwrap_or_default();
        Ok(Some(User {
            name: user.username.unwrap_or_default(),
            uid: user.uid,
            groups: user.groups.unwrap_or_default(),
            extra: user.extra.unwrap_or_default(),
        }))
    }

    async fn authorize(&self, user: &User, path: &str) -> Result<bool, String> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: user.uid.clone(),
                groups: Some(user.groups.clone()),
                extra: Some(user.extra.clone()),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_string()),
                    verb: Some("get".into()),
                }),
                resource_attributes: None,
            },
            ..SubjectAccessReview::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| {
                failed(
                    "SubjectAccessReview",
                    "subjectaccessreviews.authorization.k8s.io",
                    &e,
                )
            })?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }
}

/// A failed review in words; a refusal names the permission the agent lacks.
fn failed(review: &str, resource: &str, error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if matches!(status.code, 401 | 403) => {
            format!("{review}: {error} (the agent needs RBAC create on {resource})")
        }
        _ => format!("{review}: {error}"),
    }
}
