//! The agent's HTTP endpoints: the metrics address on the network and, when asked for, a
//! probe socket in the agent's own directory that only `/healthz` and `/readyz` answer on
//! (the DaemonSet's probes, which no stranger can answer or crowd out). Each connection is
//! served by [`super::connection`]; the server never touches the agent's state, it reads
//! what the event loop published (see [`super::snapshot`]).
//!
//! A node in trouble is when the endpoint matters least and the agent most, so neither a
//! stranger holding the port nor slow clients can take what the agent needs:
//! * an address that cannot be bound (in use, not on this host) is tried again in the
//!   background, after 1 s and then doubling up to [`BIND_RETRY_MAX`], logged once; the
//!   agent decides and acts meanwhile, and the probe socket's `/readyz` says why the
//!   address is not served;
//! * connections are taken as they come, up to a cap ([`MAX_CONNECTIONS`], fewer when the
//!   open-file limit is low: a quarter of it), each holding only its socket until its
//!   request head is in (see [`super::connection`]), and slow ones give way to new ones as
//!   [`super::admission`] rules, so a probe never waits behind them in the kernel's queue;
//!   accepts are paced (`ACCEPT_RATE` a second), so a client reconnecting as fast as it is
//!   closed costs a bounded share of the agent's CPU;
//! * a failed accept is retried after a pause that doubles up to [`ACCEPT_BACKOFF_MAX`];
//!   when the agent is out of descriptors (EMFILE, ENFILE), a descriptor held in reserve is
//!   released to accept the waiting connection and close it at once, so it neither spins nor
//!   stays queued.
use std::{
    collections::HashMap,
    fs::File,
    io,
    net::SocketAddr,
    os::unix::fs::{FileTypeExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::{
    net::{TcpListener, TcpSocket, UnixListener},
    sync::{Notify, Semaphore},
    task::AbortHandle,
    time::Instant,
};

use super::{
    admission::{Admission, Admit, Room},
    connection::{self, Shared},
    endpoint_stats::{Dropped, EndpointStats},
    pace::Pace,
};

/// The most network connections held at once: one waiting for its head costs a descriptor
/// and a few hundred bytes.
pub(crate) const MAX_CONNECTIONS: usize = 1024;
/// How many connections the kernel queues beyond those taken (the kernel caps it at
/// `net.core.somaxconn`); past that, new connections are not answered.
pub(crate) const LISTEN_BACKLOG: u32 = 1024;
/// Accepts a second on the network, in the long run, and at once after a quiet spell.
const ACCEPT_RATE: u32 = 500;
const ACCEPT_BURST: u32 = 100;
/// The first pause after a failed accept.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
/// The longest pause after failed accepts in a row.
pub(crate) const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// The first pause after a failed bind, and the longest.
const BIND_RETRY_MIN: Duration = Duration::from_secs(1);
pub(crate) const BIND_RETRY_MAX: Duration = Duration::from_secs(30);
/// Probe connections served at once (only processes in the agent's pod reach the socket).
const PROBE_CONNECTIONS: usize = 4;

/// Serves the metrics address `network` (when given) and the probe socket `probe` (when
/// given), each in a task of its own that binds it, retrying until it can; returns at once.
/// A bind that succeeds at the first attempt is logged before this returns.
pub(crate) fn start(network: Option<Vec<SocketAddr>>, probe: Option<PathBuf>, shared: Shared) {
    let shared = Arc::new(shared);
    if let Some(addrs) = network {
        let first = bind_first(&addrs);
        let shared = shared.clone();
        let what = match addrs.as_slice() {
            [addr] => format!("the metrics address {addr}"),
            _ => format!("the metrics addresses {addrs:?}"),
        };
        let bind = move || bind_first(&addrs);
        tokio::spawn(async move {
            let listener = until_bound(&what, first, bind, Some(&shared.stats)).await;
            accept_network(listener, shared).await;
        });
    }
    if let Some(path) = probe {
        let first = bind_probe_socket(&path);
        tokio::spawn(async move {
            let what = format!("the probe socket {}", path.display());
            let listener = until_bound(&what, first, || bind_probe_socket(&path), None).await;
            accept_probes(listener, shared).await;
        });
    }
}

/// A bound listener whose address can be logged.
trait Bound {
    fn describe(&self) -> String;
}

impl Bound for TcpListener {
    fn describe(&self) -> String {
        self.local_addr().map_or_else(
            |e| format!("metrics at an address not known: {e}"),
            |addr| format!("metrics at http://{addr}/metrics"),
        )
    }
}

impl Bound for UnixListener {
    fn describe(&self) -> String {
        self.local_addr()
            .ok()
            .and_then(|a| a.as_pathname().map(|p| p.display().to_string()))
            .map_or_else(
                || "probes at a socket".into(),
                |path| format!("probes (/healthz, /readyz) at {path}"),
            )
    }
}

/// `first`, or the first later `bind` that succeeds, pausing 1 s and doubling up to
/// [`BIND_RETRY_MAX`] between attempts; the failure is logged once, and kept in `stats`
/// (for `/readyz` and the bind failure counter) until it binds.
async fn until_bound<L: Bound>(
    what: &str,
    first: io::Result<L>,
    bind: impl Fn() -> io::Result<L>,
    stats: Option<&EndpointStats>,
) -> L {
    let started = Instant::now();
    let mut pause = BIND_RETRY_MIN;
    let mut failures = 0u64;
    let mut attempt = first;
    loop {
        match attempt {
            Ok(listener) => {
                if let Some(stats) = stats {
                    stats.listening();
                }
                if failures > 0 {
                    tracing::info!(
                        "{what}: bound after {failures} failed attempts in {:.0}s",
                        started.elapsed().as_secs_f64()
                    );
                }
                tracing::info!("{}", listener.describe());
                return listener;
            }
            Err(error) => {
                failures += 1;
                if let Some(stats) = stats {
                    stats.bind_failed(format!("{what}: {error}"));
                }
                if failures == 1 {
                    tracing::warn!(
                        "cannot listen on {what}: {error}; the agent decides and acts without \
                         it, trying again after {}s and then at most every {}s",
                        pause.as_secs(),
                        BIND_RETRY_MAX.as_secs()
                    );
                } else {
                    tracing::debug!("cannot listen on {what}: {error} (attempt {failures})");
                }
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(BIND_RETRY_MAX);
        attempt = bind();
    }
}

/// The first of `addrs` that can be bound (a host name's addresses, in the resolver's order).
fn bind_first(addrs: &[SocketAddr]) -> io::Result<TcpListener> {
    let mut bound = Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        "no address to listen on",
    ));
    for &addr in addrs {
        bound = bind_tcp(addr);
        if bound.is_ok() {
            break;
        }
    }
    bound
}

fn bind_tcp(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Binds a Unix socket at `path`, readable and writable by the agent's user only. A socket
/// left there by an agent that ended is replaced; any other file is not.
fn bind_probe_socket(path: &Path) -> io::Result<UnixListener> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path)?,
        Ok(meta) => {
            return Err(io::Error::other(format!(
                "{} is {}, not a socket; not replaced",
                path.display(),
                crate::file_kind::describe(meta.file_type())
            )));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// How many network connections to hold at once under an open-file limit of `nofile`: a
/// quarter of it, at least one, at most [`MAX_CONNECTIONS`].
fn connection_cap(nofile: u64) -> usize {
    usize::try_from(nofile / 4)
        .unwrap_or(usize::MAX)
        .clamp(1, MAX_CONNECTIONS)
}

/// The soft RLIMIT_NOFILE; unlimited when it cannot be read.
fn open_file_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) } == 0 {
        limit.rlim_cur
    } else {
        u64::MAX
    }
}

/// A descriptor kept open to be released when the agent runs out of them.
fn reserve() -> Option<File> {
    File::open("/dev/null").ok()
}

/// The network connections held and how to close each.
struct Held {
    admission: Admission,
    tasks: HashMap<u64, AbortHandle>,
}

/// Frees a connection's place when its task ends, however it ends (an abort included).
struct Place {
    id: u64,
    held: Arc<Mutex<Held>>,
    ended: Arc<Notify>,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut held = lock(&self.held);
        held.admission.close(self.id);
        held.tasks.remove(&self.id);
        drop(held);
        self.ended.notify_one();
    }
}

fn lock(held: &Mutex<Held>) -> std::sync::MutexGuard<'_, Held> {
    held.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn accept_network(listener: TcpListener, shared: Arc<Shared>) {
    let admission = Admission::new(connection_cap(open_file_limit()));
    tracing::debug!("metrics: at most {} connections at once", admission.cap());
    let held = Arc::new(Mutex::new(Held {
        admission,
        tasks: HashMap::new(),
    }));
    let ended = Arc::new(Notify::new());
    let mut pace = Pace::new(ACCEPT_RATE, ACCEPT_BURST, Instant::now());
    let mut spare = reserve();
    let mut backoff = ACCEPT_BACKOFF_MIN;
    loop {
        // Until there is room, connections wait in the kernel, costing the agent nothing.
        let room = lock(&held).admission.room(Instant::now());
        match room {
            Room::Now => {}
            Room::At(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    () = ended.notified() => {}
                }
                continue;
            }
            Room::WhenOneEnds => {
                ended.notified().await;
                continue;
            }
        }
        if let Some(wait) = pace.take(Instant::now()) {
            tokio::time::sleep(wait).await;
            continue;
        }
        match listener.accept().await {
            Ok((stream, peer)) => {
                backoff = ACCEPT_BACKOFF_MIN;
                let client = peer.ip().to_canonical();
                let mut guard = lock(&held);
                match guard.admission.admit(client, Instant::now()) {
                    Admit::Refuse => {
                        drop(guard);
                        shared.stats.dropped(Dropped::Refused);
                        drop(stream);
                    }
                    Admit::Take { id, evict } => {
                        if let Some(task) = evict.and_then(|old| guard.tasks.remove(&old)) {
                            task.abort();
                            shared.stats.dropped(Dropped::GaveWay);
                        }
                        let place = Place {
                            id,
                            held: held.clone(),
                            ended: ended.clone(),
                        };
                        let shared = shared.clone();
                        let on_head = {
                            let held = held.clone();
                            move || lock(&held).admission.head_done(id)
                        };
                        // Under the lock: the task cannot free its place before it is
                        // recorded.
                        let task = tokio::spawn(async move {
                            let _place = place;
                            connection::serve_network(stream, client, shared, on_head).await;
                        });
                        guard.tasks.insert(id, task.abort_handle());
                    }
                }
            }
            Err(error) => {
                if is_out_of_descriptors(&error) && spare.take().is_some() {
                    // One descriptor free: take the waiting connection off the queue and
                    // close it, so the same error does not come back at once.
                    if let Ok(Ok((stream, _))) =
                        tokio::time::timeout(ACCEPT_BACKOFF_MIN, listener.accept()).await
                    {
                        drop(stream);
                    }
                    spare = reserve();
                }
                tracing::warn!("metrics: accepting a connection: {error}; pausing {backoff:?}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
            }
        }
    }
}

/// The probe socket: only processes in the agent's pod reach it, so connections simply wait
/// their turn in the kernel.
async fn accept_probes(listener: UnixListener, shared: Arc<Shared>) {
    let slots = Arc::new(Semaphore::new(PROBE_CONNECTIONS));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        match listener.accept().await {
            Ok((stream, _)) => {
                let shared = shared.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    connection::serve_probe(stream, shared).await;
                });
            }
            Err(error) => {
                tracing::warn!("probe socket: accepting a connection: {error}");
                tokio::time::sleep(ACCEPT_BACKOFF_MAX).await;
            }
        }
    }
}

fn is_out_of_descriptors(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
