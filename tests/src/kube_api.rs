//! A MOCK Kubernetes API server for the `--kube` tests, since no real one can run here: plain
//! HTTP/1.1 on loopback, one thread per connection, serving just what the agent uses.
//!
//! - `GET /api/v1/pods` lists the pods with the current resourceVersion;
//! - `GET /api/v1/pods?watch=true&resourceVersion=N` streams every change after N as JSON
//!   lines (`ADDED`, `MODIFIED`, `DELETED`), chunked, until the mock is dropped;
//! - `POST /api/v1/namespaces/{ns}/pods/{name}/eviction` is answered with the status the
//!   test chose, for every pod or for one (201, 429 with a PodDisruptionBudget cause, 404,
//!   500), at once or after a delay the test chose (a slow API server); the names of the
//!   pods whose eviction was accepted are kept, for a stand-in kubelet to act on;
//! - `DELETE /api/v1/namespaces/{ns}/pods/{name}` answers 200 with the pod (404 if unknown);
//!   the pod stays served, as it would until the kubelet has stopped it;
//! - `GET /api/v1/events` lists the Events (the agent's and those the test posts as the
//!   kubelet's), and with `watch=true` streams those created or patched after the given
//!   resourceVersion;
//! - `POST /api/v1/namespaces/{ns}/events` keeps the core/v1 Event and answers 201 with it
//!   (409 for a name it has), and `PATCH /api/v1/namespaces/{ns}/events/{name}` (strategic
//!   merge patch) updates its fields in place, as a repeated Event's count is kept (404 for
//!   a name it has not);
//! - `PATCH /api/v1/nodes/{node}/status` (strategic merge patch) merges the conditions by
//!   type into the mock's Node and answers 200 with it; another node is 404;
//! - `GET /api/v1/nodes/{node}/proxy/stats/summary` answers the Summary the test set, 404
//!   for another node or none set;
//! - `POST /apis/authentication.k8s.io/v1/tokenreviews` authenticates the tokens the test
//!   gave a user, and `POST /apis/authorization.k8s.io/v1/subjectaccessreviews` allows what
//!   the test granted (a user, a verb and a non-resource path).
//!
//! Every request is recorded, body included. Pods are rendered from [`TestPod`]s bound to the
//! mock's node; the field selector is recorded, not applied.
use std::{
    collections::BTreeMap,
    io::Write as _,
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    sync::{Arc, Condvar, Mutex, MutexGuard},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use crate::{TempDir, TestPod};

mod api_objects;
mod events;
mod http_wire;
mod node_status;
mod reviews;

pub use api_objects::summary_json;
use api_objects::{eviction_answer, pod_json, status_json};
pub use http_wire::Request;
use http_wire::{read_request, respond};
use node_status::patch_node_status;
use reviews::Reviews;

/// One change of the pod set: the resourceVersion it produced, its type and the pod.
struct Change {
    version: u64,
    kind: &'static str,
    pod: TestPod,
}

struct State {
    node: String,
    pods: BTreeMap<String, TestPod>,
    version: u64,
    changes: Vec<Change>,
    requests: Vec<Request>,
    eviction_status: u16,
    /// Per pod name, overriding `eviction_status`.
    eviction_status_of: BTreeMap<String, u16>,
    /// How long an eviction's answer is held back.
    eviction_delay: Duration,
    /// Names of the pods whose eviction was accepted, in order.
    accepted: Vec<String>,
    /// The Events, as created and then patched.
    events: events::Events,
    /// The node's status conditions, by type, as merged from the patches.
    conditions: BTreeMap<String, serde_json::Value>,
    summary: Option<String>,
    /// The users of the tokens, and what they may do.
    reviews: Reviews,
    stopped: bool,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled on every change and request.
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The mock API server; stops serving on drop.
pub struct MockKubeApi {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl MockKubeApi {
    /// Serves on an ephemeral loopback port the pods of `node`, none yet.
    pub fn start(node: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the mock API server");
        let addr = listener.local_addr().expect("its address");
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                node: node.to_string(),
                pods: BTreeMap::new(),
                version: 1,
                changes: Vec::new(),
                requests: Vec::new(),
                eviction_status: 201,
                eviction_status_of: BTreeMap::new(),
                eviction_delay: Duration::ZERO,
                accepted: Vec::new(),
                events: events::Events::default(),
                conditions: BTreeMap::new(),
                summary: None,
                reviews: Reviews::default(),
                stopped: false,
            }),
            changed: Condvar::new(),
        });
        let serving = shared.clone();
        let accept = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if serving.lock().stopped {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let shared = serving.clone();
                std::thread::spawn(move || serve(stream, &shared));
            }
        });
        Self {
            addr,
            shared,
            accept: Some(accept),
        }
    }

    /// Writes a kubeconfig that points at the mock over plain HTTP, without credentials.
    pub fn write_kubeconfig(&self, path: &Path) {
        let text = format!(
            "apiVersion: v1\nkind: Config\n\
             clusters:\n- name: mock\n  cluster:\n    server: http://{}\n\
             users:\n- name: mock\n  user: {{}}\n\
             contexts:\n- name: mock\n  context:\n    cluster: mock\n    user: mock\n\
             current-context: mock\n",
            self.addr
        );
        std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }

    /// A kubeconfig pointing at the mock ([`Self::write_kubeconfig`]), in a directory named
    /// after `name` that is removed on drop.
    pub fn kubeconfig_in(&self, name: &str) -> (TempDir, PathBuf) {
        let files = TempDir::new(name);
        let path = files.join("kubeconfig");
        self.write_kubeconfig(&path);
        (files, path)
    }

    /// Adds the pod, or replaces it (same name): an `ADDED` or `MODIFIED` event.
    pub fn apply_pod(&self, pod: &TestPod) {
        let mut state = self.shared.lock();
        let kind = if state.pods.contains_key(&pod.name) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        state.pods.insert(pod.name.clone(), pod.clone());
        self.record_change(state, kind, pod.clone());
    }

    /// Removes the pod: a `DELETED` event.
    pub fn delete_pod(&self, pod: &TestPod) {
        let mut state = self.shared.lock();
        let removed = state
            .pods
            .remove(&pod.name)
            .expect("deleting a pod the mock serves");
        self.record_change(state, "DELETED", removed);
    }

    fn record_change(&self, mut state: MutexGuard<'_, State>, kind: &'static str, pod: TestPod) {
        state.version += 1;
        let version = state.version;
        state.changes.push(Change { version, kind, pod });
        drop(state);
        self.shared.changed.notify_all();
    }

    /// The HTTP status evictions are answered with from now on.
    pub fn answer_evictions_with(&self, status: u16) {
        self.shared.lock().eviction_status = status;
    }

    /// The HTTP status evictions of the pod named `pod` are answered with from now on.
    pub fn answer_evictions_of_with(&self, pod: &str, status: u16) {
        self.shared
            .lock()
            .eviction_status_of
            .insert(pod.to_string(), status);
    }

    /// Evictions are answered `delay` after they arrive from now on, as by a slow API server.
    pub fn answer_evictions_after(&self, delay: Duration) {
        self.shared.lock().eviction_delay = delay;
    }

    /// Names of the pods whose eviction was accepted (answered 200 or 201), in order.
    pub fn accepted_evictions(&self) -> Vec<String> {
        self.shared.lock().accepted.clone()
    }

    /// The Summary API answer for the mock's node from now on.
    pub fn serve_summary(&self, summary: &str) {
        self.shared.lock().summary = Some(summary.to_string());
    }

    /// The PodList the mock answers a list of pods with now, as `kubectl get pods -o json`
    /// would save it.
    pub fn pod_list(&self) -> String {
        pod_list_json(&self.shared.lock())
    }

    /// The Events so far, in the order they were created, as they stand now (a patched
    /// Event with its count).
    pub fn events(&self) -> Vec<serde_json::Value> {
        self.shared.lock().events.all()
    }

    /// An `Evicted` Event as the kubelet of `host` posts it when it evicts `pod` under node
    /// pressure, first seen at `unix_secs` (its timestamps are whole seconds); served to
    /// lists and watches of Events.
    pub fn post_kubelet_eviction(&self, pod: &TestPod, host: &str, unix_secs: u64, message: &str) {
        let time = monitor::checkpoint::wall_time::rfc3339(unix_secs * 1000);
        let event = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": format!("{}.{:x}", pod.name, unix_secs),
                "namespace": "default",
                "creationTimestamp": time,
            },
            "involvedObject": {
                "kind": "Pod", "apiVersion": "v1", "namespace": "default",
                "name": pod.name, "uid": pod.uid,
            },
            "reason": "Evicted",
            "message": message,
            "source": {"component": "kubelet", "host": host},
            "firstTimestamp": time,
            "lastTimestamp": time,
            "count": 1,
            "type": "Warning",
        });
        self.shared.lock().events.insert(event);
        self.shared.changed.notify_all();
    }

    /// Forgets every Event, as the API server lets them expire (after an hour by default).
    pub fn expire_events(&self) {
        self.shared.lock().events = events::Events::default();
    }

    /// The node's condition of `type_`, as last patched.
    pub fn condition(&self, type_: &str) -> Option<serde_json::Value> {
        self.shared.lock().conditions.get(type_).cloned()
    }

    /// Looks at the mock until `look` finds something, for up to `timeout`.
    pub fn wait_until<T>(
        &self,
        timeout: Duration,
        look: impl Fn(&MockKubeApi) -> Option<T>,
    ) -> Option<T> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(found) = look(self) {
                return Some(found);
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            let state = self.shared.lock();
            drop(
                self.shared
                    .changed
                    .wait_timeout(state, left.min(Duration::from_millis(100)))
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
        }
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Request> {
        self.shared.lock().requests.clone()
    }

    /// The first request so far or within `timeout` that `matches`.
    pub fn wait_for_request(
        &self,
        timeout: Duration,
        matches: impl Fn(&Request) -> bool,
    ) -> Option<Request> {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.lock();
        loop {
            if let Some(request) = state.requests.iter().find(|r| matches(r)) {
                return Some(request.clone());
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            state = self
                .shared
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }
}

impl Drop for MockKubeApi {
    fn drop(&mut self) {
        self.shared.lock().stopped = true;
        self.shared.changed.notify_all();
        // Wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

/// Answers one request and closes the connection (every answer says so, and the client
/// opens a new one for the next request).
fn serve(stream: TcpStream, shared: &Shared) {
    let Some(request) = read_request(&stream) else {
        return;
    };
    shared.lock().requests.push(request.clone());
    shared.changed.notify_all();
    let mut out = stream;
    let path = request.path().to_string();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let _ = match (request.method.as_str(), segments.as_slice()) {
        ("GET", ["api", "v1", "pods"]) if request.is_watch() => watch(&mut out, &request, shared),
        ("GET", ["api", "v1", "events"]) if request.is_watch() => {
            watch_events(&mut out, &request, shared)
        }
        ("GET", ["api", "v1", "events"]) => {
            let body = shared.lock().events.list_json();
            respond(&mut out, 200, &body)
        }
        ("GET", ["api", "v1", "pods"]) => {
            let body = pod_list_json(&shared.lock());
            respond(&mut out, 200, &body)
        }
        ("POST", ["api", "v1", "namespaces", _, "pods", name, "eviction"]) => {
            let state = shared.lock();
            let status = state
                .eviction_status_of
                .get(*name)
                .copied()
                .unwrap_or(state.eviction_status);
            let delay = state.eviction_delay;
            drop(state);
            std::thread::sleep(delay);
            let answered = respond(&mut out, status, &eviction_answer(status, name));
            if matches!(status, 200 | 201) {
                shared.lock().accepted.push(name.to_string());
                shared.changed.notify_all();
            }
            answered
        }
        ("DELETE", ["api", "v1", "namespaces", _, "pods", name]) => {
            let state = shared.lock();
            let pod = state
                .pods
                .get(*name)
                .map(|p| pod_json(p, &state.node, state.version));
            drop(state);
            match pod {
                Some(pod) => respond(&mut out, 200, &pod),
                None => respond(&mut out, 404, &eviction_answer(404, name)),
            }
        }
        ("POST", ["api", "v1", "namespaces", _, "events"]) => {
            let (status, body) = shared.lock().events.create(&request);
            shared.changed.notify_all();
            respond(&mut out, status, &body)
        }
        ("PATCH", ["api", "v1", "namespaces", _, "events", name]) => {
            let (status, body) = shared.lock().events.patch(&request, name);
            shared.changed.notify_all();
            respond(&mut out, status, &body)
        }
        ("PATCH", ["api", "v1", "nodes", node, "status"]) => {
            patch_node_status(&mut out, &request, node, shared)
        }
        ("GET", ["api", "v1", "nodes", node, "proxy", "stats", "summary"]) => {
            let state = shared.lock();
            let summary = state.summary.clone().filter(|_| *node == state.node);
            drop(state);
            match summary {
                Some(summary) => respond(&mut out, 200, &summary),
                None => respond(
                    &mut out,
                    404,
                    &status_json(404, "NotFound", &format!("nodes \"{node}\" not found"), ""),
                ),
            }
        }
        ("POST", ["apis", "authentication.k8s.io", "v1", "tokenreviews"]) => {
            let answer = shared.lock().reviews.token_review(&request.body);
            respond(&mut out, 201, &answer)
        }
        ("POST", ["apis", "authorization.k8s.io", "v1", "subjectaccessreviews"]) => {
            let answer = shared.lock().reviews.access_review(&request.body);
            respond(&mut out, 201, &answer)
        }
        _ => respond(
            &mut out,
            404,
            &status_json(404, "NotFound", "not served by the mock", ""),
        ),
    };
}

/// The PodList a list of pods is answered with.
fn pod_list_json(state: &State) -> String {
    let items: Vec<String> = state
        .pods
        .values()
        .map(|p| pod_json(p, &state.node, state.version))
        .collect();
    format!(
        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"{}"}},"items":[{}]}}"#,
        state.version,
        items.join(",")
    )
}

/// Streams the pod changes after the request's resourceVersion until the mock stops or the
/// client goes away.
fn watch(out: &mut TcpStream, request: &Request, shared: &Shared) -> std::io::Result<()> {
    stream_changes(out, request, shared, |state, sent| {
        let lines = state
            .changes
            .iter()
            .filter(|c| c.version > sent)
            .map(|c| {
                format!(
                    "{{\"type\":\"{}\",\"object\":{}}}\n",
                    c.kind,
                    pod_json(&c.pod, &state.node, c.version)
                )
            })
            .collect();
        (lines, state.version)
    })
}

/// Streams the Events created or patched after the request's resourceVersion until the mock
/// stops or the client goes away.
fn watch_events(out: &mut TcpStream, request: &Request, shared: &Shared) -> std::io::Result<()> {
    stream_changes(out, request, shared, |state, sent| {
        state.events.lines_after(sent)
    })
}

/// A watch's chunked answer: `lines_after(state, version)` gives the watch lines after a
/// version and the version they bring the watch to, sent as they come.
fn stream_changes(
    out: &mut TcpStream,
    request: &Request,
    shared: &Shared,
    lines_after: impl Fn(&State, u64) -> (String, u64),
) -> std::io::Result<()> {
    write!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\
         Connection: close\r\n\r\n"
    )?;
    let mut sent: u64 = request
        .query("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut state = shared.lock();
    loop {
        let (lines, version) = lines_after(&state, sent);
        sent = version;
        if state.stopped {
            drop(state);
            return out.write_all(b"0\r\n\r\n");
        }
        if !lines.is_empty() {
            drop(state);
            write!(out, "{:x}\r\n{lines}\r\n", lines.len())?;
            out.flush()?;
            state = shared.lock();
            continue;
        }
        state = shared
            .changed
            .wait_timeout(state, Duration::from_millis(100))
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .0;
    }
}
