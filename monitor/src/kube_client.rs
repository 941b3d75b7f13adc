//! The agent's Kubernetes API clients, with every answer's body bounded: at most
//! [`MAX_ANSWER_BYTES`] for an answer, at most [`MAX_WATCH_LINE_BYTES`] for one line (one
//! event) of a watch, which streams for as long as it runs. An answer past its bound fails
//! with that said, instead of growing the agent's memory (kube-rs reads bodies whole and
//! watch lines without a limit). The API server stores objects of at most 1.5 MiB.
use std::{
    error::Error as StdError,
    fmt,
    pin::Pin,
    task::{Context, Poll, ready},
};

use bytes::Bytes;
use http::{Request, Response, Uri};
use http_body::{Body, Frame, SizeHint};
use kube::{Client, Config, client::ClientBuilder};
use tower_layer::Layer;
use tower_service::Service;

/// The largest answer read (a node's pods, its Summary, a review).
pub(crate) const MAX_ANSWER_BYTES: u64 = 32 << 20;
/// The longest line of a watch (one event: one object).
pub(crate) const MAX_WATCH_LINE_BYTES: u64 = 4 << 20;

type BoxError = Box<dyn StdError + Send + Sync>;

/// A client for `config` whose answers are bounded as above.
pub(crate) fn client(config: Config) -> Result<Client, kube::Error> {
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&BoundedAnswers)
        .build())
}

/// An answer past its bound.
#[derive(Debug)]
struct TooLarge {
    limit: u64,
    watch: bool,
}

impl fmt::Display for TooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.watch {
            "a line (one event) of the API server's watch"
        } else {
            "the API server's answer"
        };
        write!(
            f,
            "{what} is over {} MiB; not read further",
            self.limit >> 20
        )
    }
}

impl StdError for TooLarge {}

struct BoundedAnswers;

impl<S> Layer<S> for BoundedAnswers {
    type Service = Bounded<S>;

    fn layer(&self, inner: S) -> Bounded<S> {
        Bounded { inner }
    }
}

struct Bounded<S> {
    inner: S,
}

/// Whether a request asks for a watch (`watch=true` or `watch=1` in its query).
fn is_watch(uri: &Uri) -> bool {
    uri.query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| pair == "watch=true" || pair == "watch=1")
    })
}

impl<S, B, Q> Service<Request<Q>> for Bounded<S>
where
    S: Service<Request<Q>, Response = Response<B>>,
    S::Future: Send + 'static,
{
    type Response = Response<Limited<B>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Q>) -> Self::Future {
        let watch = is_watch(request.uri());
        let answer = self.inner.call(request);
        Box::pin(async move {
            Ok(answer.await?.map(|inner| Limited {
                inner,
                watch,
                seen: 0,
            }))
        })
    }
}

/// A body that fails once past its bound: its bytes in all, or for a watch since its last
/// newline.
struct Limited<B> {
    inner: B,
    watch: bool,
    seen: u64,
}

impl<B> Limited<B> {
    fn count(&mut self, data: &Bytes) -> Result<(), TooLarge> {
        let limit = if self.watch {
            MAX_WATCH_LINE_BYTES
        } else {
            MAX_ANSWER_BYTES
        };
        match data
            .iter()
            .rposition(|b| *b == b'\n')
            .filter(|_| self.watch)
        {
            Some(at) => self.seen = (data.len() - at - 1) as u64,
            None => self.seen += data.len() as u64,
        }
        if self.seen > limit {
            return Err(TooLarge {
                limit,
                watch: self.watch,
            });
        }
        Ok(())
    }
}

impl<B> Body for Limited<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let frame = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        Poll::Ready(match frame {
            Some(Ok(frame)) => match frame.data_ref().map(|data| this.count(data)) {
                Some(Err(too_large)) => Some(Err(Box::new(too_large))),
                _ => Some(Ok(frame)),
            },
            Some(Err(error)) => Some(Err(error.into())),
            None => None,
        })
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::{
        io::{Read as _, Write as _},
        net::TcpListener,
    };

    use futures::StreamExt as _;
    use k8s_openapi::api::core::v1::Pod;
    use kube::{Api, api::WatchParams};

    use super::*;

    /// A server on loopback that answers every request with `head` and then `body_bytes`
    /// bytes of `fill` (a newline every `line` bytes when given), in 64 KiB pieces.
    fn server(head: &'static str, body_bytes: usize, line: Option<usize>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                std::thread::spawn(move || {
                    let mut request = [0u8; 4096];
                    let _ = stream.read(&mut request);
                    let _ = stream.write_all(head.as_bytes());
                    let mut piece = vec![b'x'; 64 << 10];
                    if let Some(line) = line {
                        for (i, byte) in piece.iter_mut().enumerate() {
                            if (i + 1) % line == 0 {
                                *byte = b'\n';
                            }
                        }
                    }
                    let mut sent = 0;
                    while sent < body_bytes {
                        let n = piece.len().min(body_bytes - sent);
                        if stream.write_all(&piece[..n]).is_err() {
                            return;
                        }
                        sent += n;
                    }
                });
            }
        });
        format!("http://{addr}")
    }

    fn client_of(url: &str) -> Client {
        let mut config = Config::new(url.parse().unwrap());
        config.default_retry = false;
        client(config).unwrap()
    }

    #[tokio::test]
    async fn an_answer_past_its_bound_fails_saying_so() {
        let body = (MAX_ANSWER_BYTES + (1 << 20)) as usize;
        let url = server(
            Box::leak(
                format!("HTTP/1.1 200 OK\r\nContent-Length: {body}\r\n\r\n").into_boxed_str(),
            ),
            body,
            None,
        );
        let request = Request::get("/api/v1/pods").body(Vec::new()).unwrap();
        let error = client_of(&url).request_text(request).await.unwrap_err();
        assert!(
            error
                .to_string()
                .contains("the API server's answer is over 32 MiB; not read further"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_watch_line_past_its_bound_fails_and_short_lines_pass_whatever_their_sum() {
        let chunked =
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n";
        // One line far over the bound: the stream fails with the reason.
        let url = server(chunked, (MAX_WATCH_LINE_BYTES * 2) as usize, None);
        let api: Api<Pod> = Api::all(client_of(&url));
        let mut events = api
            .watch(&WatchParams::default(), "0")
            .await
            .unwrap()
            .boxed();
        let mut failure = None;
        while let Some(event) = events.next().await {
            if let Err(error) = event {
                failure = Some(error.to_string());
                break;
            }
        }
        let failure = failure.expect("the watch failed");
        assert!(
            failure.contains("a line (one event) of the API server's watch is over 4 MiB"),
            "{failure}"
        );
        // Lines of 1 KiB, more in all than the bound for an answer: no failure from the
        // bound (each line is not an event; the codec says so).
        let url = server(chunked, (MAX_WATCH_LINE_BYTES * 3) as usize, Some(1024));
        let api: Api<Pod> = Api::all(client_of(&url));
        let mut events = api
            .watch(&WatchParams::default(), "0")
            .await
            .unwrap()
            .boxed();
        while let Some(event) = events.next().await {
            if let Err(error) = event {
                assert!(!error.to_string().contains("not read further"), "{error}");
            }
        }
    }

    #[test]
    fn a_watch_is_told_by_its_query() {
        for (uri, watch) in [
            ("/api/v1/pods?watch=true&resourceVersion=1", true),
            ("/api/v1/pods?fieldSelector=x&watch=1", true),
            ("/api/v1/pods?watch=false", false),
            (
                "/api/v1/pods?fieldSelector=spec.nodeName%3Dwatch%3Dtrue",
                false,
            ),
            ("/api/v1/pods", false),
        ] {
            assert_eq!(is_watch(&uri.parse().unwrap()), watch, "{uri}");
        }
    }
}
