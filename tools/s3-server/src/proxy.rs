//! HTTP/1.1 reverse proxy that emulates a network link (per-request delay,
//! shared bandwidth cap on response bodies) and injects faults on demand.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use futures::StreamExt as _;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, BodyStream, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio::time::Instant;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// Bytes a response may send ahead of the link's schedule (an idle link
/// does not make the first small response wait).
const BURST_BYTES: f64 = 64.0 * 1024.0;
/// Response bodies are metered in pieces of at most this size.
const PIECE: usize = 16 * 1024;

/// Options for [`start`].
#[derive(Debug, Clone)]
pub struct ProxyOptions {
    /// Address clients connect to (port 0 picks a free port).
    pub listen: SocketAddr,
    /// Address of the control endpoint (port 0 picks a free port).
    pub control_listen: SocketAddr,
    /// The S3 server.
    pub upstream: SocketAddr,
    /// Added once per request, before it is forwarded.
    pub delay: Duration,
    /// Cap on response-body bytes, shared by all connections, in megabits
    /// per second (10^6 bit/s); 0 means unlimited.
    pub bandwidth_mbps: f64,
}

impl ProxyOptions {
    /// Loopback listeners on free ports, no delay, no bandwidth cap.
    pub fn new(upstream: SocketAddr) -> Self {
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        Self {
            listen: any,
            control_listen: any,
            upstream,
            delay: Duration::ZERO,
            bandwidth_mbps: 0.0,
        }
    }
}

/// The kind of fault to inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultMode {
    /// Forward normally.
    None,
    /// Answer `503 SlowDown` without forwarding.
    SlowDown,
    /// Forward, then cut the response body after half its bytes and close
    /// the connection (only responses that have a body count).
    Truncate,
    /// Close the connection without answering (the request is not forwarded).
    Reset,
    /// Forward, wait for the server's answer, then close the connection without passing it
    /// on: the server acted but the client never learns it did (a reply lost on the way).
    Lost,
}

impl FaultMode {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "none" => Some(Self::None),
            "503" | "slowdown" => Some(Self::SlowDown),
            "truncate" => Some(Self::Truncate),
            "reset" => Some(Self::Reset),
            "lost" => Some(Self::Lost),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::SlowDown => "503",
            Self::Truncate => "truncate",
            Self::Reset => "reset",
            Self::Lost => "lost",
        }
    }
}

#[derive(Debug)]
struct Fault {
    mode: FaultMode,
    remaining: u64,
    /// Only requests with this method are hit (None: all).
    method: Option<Method>,
    /// Only requests whose query string contains this are hit (None: all).
    query: Option<String>,
}

#[derive(Debug, Default)]
struct Stats {
    requests: u64,
    by_method: BTreeMap<String, u64>,
    faults_injected: BTreeMap<&'static str, u64>,
    response_body_bytes: u64,
    upstream_errors: u64,
}

#[derive(Debug, Clone, Copy)]
struct NetConfig {
    delay: Duration,
    /// bytes per second; 0 = unlimited
    bytes_per_sec: f64,
}

struct State {
    upstream: SocketAddr,
    client: Client<HttpConnector, Incoming>,
    net: Mutex<NetConfig>,
    /// When the emulated link has sent everything scheduled so far.
    link_free_at: Mutex<Instant>,
    fault: Mutex<Fault>,
    stats: Mutex<Stats>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl State {
    /// Take one fault of `mode` for a request with `method` and `query`, if armed.
    fn take_fault(&self, method: &Method, query: &str, modes: &[FaultMode]) -> Option<FaultMode> {
        let mut f = lock(&self.fault);
        if !modes.contains(&f.mode) || f.remaining == 0 {
            return None;
        }
        if f.method.as_ref().is_some_and(|m| m != method) {
            return None;
        }
        if f.query
            .as_ref()
            .is_some_and(|q| !query.contains(q.as_str()))
        {
            return None;
        }
        let mode = f.mode;
        f.remaining -= 1;
        if f.remaining == 0 {
            f.mode = FaultMode::None;
        }
        drop(f);
        *lock(&self.stats)
            .faults_injected
            .entry(mode.name())
            .or_default() += 1;
        Some(mode)
    }

    /// Wait until `n` more bytes fit through the emulated link.
    async fn throttle(&self, n: usize) {
        let rate = lock(&self.net).bytes_per_sec;
        if rate <= 0.0 {
            return;
        }
        let now = Instant::now();
        let done_at = {
            let mut free_at = lock(&self.link_free_at);
            let burst = Duration::from_secs_f64(BURST_BYTES / rate);
            let earliest = now.checked_sub(burst).unwrap_or(now);
            let start = (*free_at).max(earliest);
            *free_at = start + Duration::from_secs_f64(n as f64 / rate);
            *free_at
        };
        if done_at > now {
            tokio::time::sleep_until(done_at).await;
        }
    }

    fn stats_json(&self) -> serde_json::Value {
        let s = lock(&self.stats);
        let f = lock(&self.fault);
        let net = *lock(&self.net);
        serde_json::json!({
            "requests": s.requests,
            "by_method": s.by_method,
            "faults_injected": s.faults_injected,
            "response_body_bytes": s.response_body_bytes,
            "upstream_errors": s.upstream_errors,
            "fault": {
                "mode": f.mode.name(),
                "remaining": f.remaining,
                "method": f.method.as_ref().map(Method::as_str),
                "query": f.query,
            },
            "delay_ms": net.delay.as_secs_f64() * 1000.0,
            "bandwidth_mbps": net.bytes_per_sec * 8.0 / 1e6,
        })
    }
}

/// A running proxy; it stops when dropped.
pub struct Proxy {
    addr: SocketAddr,
    control_addr: SocketAddr,
    tasks: Vec<JoinHandle<()>>,
}

impl Proxy {
    /// Address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` of the proxied S3 endpoint.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Address of the control endpoint.
    pub fn control_addr(&self) -> SocketAddr {
        self.control_addr
    }

    /// Serve until a task fails (they do not, short of a panic).
    pub async fn wait(mut self) -> anyhow::Result<()> {
        let tasks = std::mem::take(&mut self.tasks);
        let (res, _, _) = futures::future::select_all(tasks).await;
        res.context("proxy task failed")
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Bind both listeners and start serving in background tasks.
pub async fn start(opts: ProxyOptions) -> anyhow::Result<Proxy> {
    if !(opts.bandwidth_mbps >= 0.0 && opts.bandwidth_mbps.is_finite()) {
        anyhow::bail!("bandwidth must be a non-negative number of Mbit/s");
    }
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client = Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build(connector);
    let state = Arc::new(State {
        upstream: opts.upstream,
        client,
        net: Mutex::new(NetConfig {
            delay: opts.delay,
            bytes_per_sec: opts.bandwidth_mbps * 1e6 / 8.0,
        }),
        link_free_at: Mutex::new(Instant::now()),
        fault: Mutex::new(Fault {
            mode: FaultMode::None,
            remaining: 0,
            method: None,
            query: None,
        }),
        stats: Mutex::new(Stats::default()),
    });

    let listener = TcpListener::bind(opts.listen)
        .await
        .with_context(|| format!("cannot listen on {}", opts.listen))?;
    let control = TcpListener::bind(opts.control_listen)
        .await
        .with_context(|| format!("cannot listen on {}", opts.control_listen))?;
    let addr = listener.local_addr()?;
    let control_addr = control.local_addr()?;

    let st = state.clone();
    let proxy_task = tokio::spawn(accept_loop(listener, move |req| {
        let st = st.clone();
        async move { proxy_request(st, req).await }
    }));
    let st = state.clone();
    let control_task = tokio::spawn(accept_loop(control, move |req| {
        let st = st.clone();
        async move { Ok::<_, Infallible>(control_request(&st, req)) }
    }));
    Ok(Proxy {
        addr,
        control_addr,
        tasks: vec![proxy_task, control_task],
    })
}

async fn accept_loop<F, Fut, E>(listener: TcpListener, handler: F)
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Response<ProxyBody>, E>> + Send + 'static,
    E: Into<BoxError> + 'static,
{
    loop {
        let (socket, _) = match listener.accept().await {
            Ok(conn) => conn,
            Err(err) => {
                tracing::warn!("accept failed: {err}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        if let Err(err) = socket.set_nodelay(true) {
            tracing::warn!("set_nodelay failed: {err}");
        }
        let handler = handler.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(handler);
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(socket), service);
            if let Err(err) = conn.await {
                tracing::debug!("connection closed: {err}");
            }
        });
    }
}

fn full(body: impl Into<Bytes>) -> ProxyBody {
    Full::new(body.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

fn text_response(
    status: StatusCode,
    content_type: &'static str,
    body: String,
) -> Response<ProxyBody> {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    resp
}

fn slow_down() -> Response<ProxyBody> {
    let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code>\
                <Message>Please reduce your request rate. (injected by quire-s3-proxy)</Message></Error>";
    text_response(
        StatusCode::SERVICE_UNAVAILABLE,
        "application/xml",
        body.to_owned(),
    )
}

/// Hop-by-hop headers (RFC 9110 §7.6.1) are not forwarded; hyper frames
/// the bodies itself.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    const HOP: [&str; 7] = [
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ];
    for name in HOP {
        headers.remove(HeaderName::from_static(name));
    }
}

#[derive(Debug)]
struct InjectedReset;

impl std::fmt::Display for InjectedReset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection reset injected by quire-s3-proxy")
    }
}

impl std::error::Error for InjectedReset {}

#[derive(Debug)]
struct InjectedTruncation;

impl std::fmt::Display for InjectedTruncation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("response truncated by quire-s3-proxy")
    }
}

impl std::error::Error for InjectedTruncation {}

async fn proxy_request(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, InjectedReset> {
    let method = req.method().clone();
    {
        let mut s = lock(&state.stats);
        s.requests += 1;
        *s.by_method.entry(method.as_str().to_owned()).or_default() += 1;
    }
    let delay = lock(&state.net).delay;
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let query = req.uri().query().unwrap_or("").to_owned();
    let fault = state.take_fault(
        &method,
        &query,
        &[FaultMode::SlowDown, FaultMode::Reset, FaultMode::Lost],
    );
    match fault {
        Some(FaultMode::SlowDown) => return Ok(slow_down()),
        // An error from the service makes hyper close the connection
        // without writing a response.
        Some(FaultMode::Reset) => return Err(InjectedReset),
        _ => {}
    }

    let (mut parts, body) = req.into_parts();
    let pq = parts
        .uri
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .to_owned();
    parts.uri = match format!("http://{}{pq}", state.upstream).parse() {
        Ok(uri) => uri,
        Err(err) => {
            return Ok(text_response(
                StatusCode::BAD_REQUEST,
                "text/plain",
                format!("quire-s3-proxy: bad request target: {err}\n"),
            ))
        }
    };
    strip_hop_by_hop(&mut parts.headers);
    // The Host header is kept as the client sent it: it is part of the
    // SigV4 signature the server verifies.
    let upstream_req = Request::from_parts(parts, body);
    let resp = match state.client.request(upstream_req).await {
        Ok(resp) => resp,
        Err(err) => {
            lock(&state.stats).upstream_errors += 1;
            return Ok(text_response(
                StatusCode::BAD_GATEWAY,
                "text/plain",
                format!("quire-s3-proxy: upstream request failed: {err}\n"),
            ));
        }
    };

    if fault == Some(FaultMode::Lost) {
        // The server has answered: read its answer to the end (so that it has finished
        // acting), then drop it with the connection.
        let _ = resp.into_body().collect().await;
        return Err(InjectedReset);
    }
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let content_length: Option<u64> = parts
        .headers
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let has_body = method != Method::HEAD
        && parts.status != StatusCode::NO_CONTENT
        && parts.status != StatusCode::NOT_MODIFIED
        && content_length != Some(0);
    // Truncation budget: half of the body (of the first frame when the
    // length is not announced).
    let truncate = has_body
        && state
            .take_fault(&method, &query, &[FaultMode::Truncate])
            .is_some();
    let budget = if truncate {
        Some(content_length.map(|n| n / 2))
    } else {
        None
    };
    let body = metered_body(state, body, budget);
    Ok(Response::from_parts(parts, body))
}

/// Stream state of a forwarded response body.
struct Metered {
    state: Arc<State>,
    body: BodyStream<Incoming>,
    pending: Bytes,
    /// `Some(Some(n))`: cut after `n` more bytes; `Some(None)`: cut after
    /// half of the next frame; `None`: forward everything.
    budget: Option<Option<u64>>,
    done: bool,
}

fn metered_body(state: Arc<State>, body: Incoming, budget: Option<Option<u64>>) -> ProxyBody {
    let m = Metered {
        state,
        body: BodyStream::new(body),
        pending: Bytes::new(),
        budget,
        done: false,
    };
    let stream = futures::stream::unfold(m, |mut m| async move {
        if m.done {
            return None;
        }
        if m.pending.is_empty() {
            match m.body.next().await {
                None => return None,
                Some(Err(err)) => {
                    m.done = true;
                    return Some((Err(BoxError::from(err)), m));
                }
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        if let Some(None) = m.budget {
                            m.budget = Some(Some(data.len() as u64 / 2));
                        }
                        m.pending = data;
                    }
                    Err(frame) => return Some((Ok(frame), m)),
                },
            }
        }
        let mut n = m.pending.len().min(PIECE);
        if let Some(Some(left)) = m.budget {
            if left == 0 {
                m.done = true;
                return Some((Err(BoxError::from(InjectedTruncation)), m));
            }
            n = n.min(usize::try_from(left).unwrap_or(usize::MAX));
            m.budget = Some(Some(left - n as u64));
        }
        let piece = m.pending.split_to(n);
        m.state.throttle(piece.len()).await;
        lock(&m.state.stats).response_body_bytes += piece.len() as u64;
        Some((Ok(Frame::data(piece)), m))
    });
    StreamBody::new(stream).boxed_unsync()
}

fn query_params(req: &Request<Incoming>) -> BTreeMap<String, String> {
    req.uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (k.to_owned(), v.to_owned()),
            None => (kv.to_owned(), String::new()),
        })
        .collect()
}

fn json_response(status: StatusCode, value: serde_json::Value) -> Response<ProxyBody> {
    text_response(status, "application/json", format!("{value}\n"))
}

fn bad_request(msg: String) -> Response<ProxyBody> {
    json_response(StatusCode::BAD_REQUEST, serde_json::json!({ "error": msg }))
}

fn control_request(state: &State, req: Request<Incoming>) -> Response<ProxyBody> {
    let params = query_params(&req);
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/stats") => json_response(StatusCode::OK, state.stats_json()),
        (&Method::POST, "/stats/reset") => {
            *lock(&state.stats) = Stats::default();
            json_response(StatusCode::OK, state.stats_json())
        }
        (&Method::POST, "/fault") => {
            let mode_str = params.get("mode").map_or("none", String::as_str);
            let Some(mode) = FaultMode::parse(mode_str) else {
                return bad_request(format!(
                    "unknown mode {mode_str:?}; expected 503, truncate, reset, lost or none"
                ));
            };
            let count = match params.get("count").map(|c| c.parse::<u64>()) {
                None => 1,
                Some(Ok(c)) => c,
                Some(Err(_)) => return bad_request("count must be a non-negative integer".into()),
            };
            let method = match params.get("method") {
                None => None,
                Some(m) => match Method::from_bytes(m.to_ascii_uppercase().as_bytes()) {
                    Ok(m) => Some(m),
                    Err(_) => return bad_request(format!("invalid method {m:?}")),
                },
            };
            let query = params.get("query").cloned();
            {
                let mut f = lock(&state.fault);
                if mode == FaultMode::None || count == 0 {
                    *f = Fault {
                        mode: FaultMode::None,
                        remaining: 0,
                        method: None,
                        query: None,
                    };
                } else {
                    *f = Fault {
                        mode,
                        remaining: count,
                        method,
                        query,
                    };
                }
            }
            json_response(StatusCode::OK, state.stats_json())
        }
        (&Method::POST, "/config") => {
            let mut net = *lock(&state.net);
            if let Some(d) = params.get("delay_ms") {
                match d.parse::<f64>() {
                    Ok(ms) if ms >= 0.0 && ms.is_finite() => {
                        net.delay = Duration::from_secs_f64(ms / 1000.0)
                    }
                    _ => return bad_request("delay_ms must be a non-negative number".into()),
                }
            }
            if let Some(b) = params.get("bandwidth_mbps") {
                match b.parse::<f64>() {
                    Ok(mbps) if mbps >= 0.0 && mbps.is_finite() => {
                        net.bytes_per_sec = mbps * 1e6 / 8.0
                    }
                    _ => return bad_request("bandwidth_mbps must be a non-negative number".into()),
                }
            }
            *lock(&state.net) = net;
            json_response(StatusCode::OK, state.stats_json())
        }
        _ => json_response(
            StatusCode::NOT_FOUND,
            serde_json::json!({
                "error": "unknown endpoint",
                "endpoints": [
                    "POST /fault?mode=503|truncate|reset|lost|none&count=N[&method=GET][&query=SUBSTRING]",
                    "POST /config?delay_ms=X&bandwidth_mbps=Y",
                    "GET /stats",
                    "POST /stats/reset",
                ],
            }),
        ),
    }
}
