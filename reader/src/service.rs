//! The HTTP face of the reader: routing, bounded body reading, and the endpoints
//! (`POST /v1/vectors`, `GET /healthz`, `GET /readyz`, `GET /metrics`). Transport-agnostic: `server` feeds it
//! requests from HTTP/1.1 and h2c connections alike.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use ferry_protos::{PROTOBUF_CONTENT_TYPE, READER_PATH};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Body;
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Method, Request, Response};
use prost::Message;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;

use crate::batch::Batch;
use crate::config::Config;
use crate::error::ReaderError;
use crate::health::Health;
use crate::metrics::{Metrics, Route};
use crate::store::Store;

/// A client gets this long to send its request body; a stalled upload must not hold one of the
/// `--max-concurrency` slots forever.
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// A step of `Reader::lookup_marked` that has just ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LookupStep {
    /// The request body was checked and decoded into its Redis command.
    Decoded,
    /// Redis answered.
    Fetched,
}

/// Everything a request needs, shared by all connections behind one `Arc`.
#[derive(Debug)]
pub struct Reader {
    /// Redis behind one multiplexed, self-healing connection.
    store: Store,
    /// `/healthz` and `/readyz`, with the cached reachability of Redis.
    health: Health,
    /// The reader's counters, also read by `/metrics`.
    metrics: Arc<Metrics>,
    /// One permit per `/v1/vectors` request in progress (`--max-concurrency`). It is taken
    /// before the body is read, so body memory is bounded by `max_concurrency * max_body_bytes`
    /// and Redis never sees more than that many batches at once; further requests wait.
    permits: Semaphore,
    /// Bytes of request bodies being read, one permit per byte (`--max-body-memory`), taken
    /// as the bytes arrive: reading bodies never holds a Redis slot, and body memory stays
    /// bounded however many connections upload at once.
    body_memory: Semaphore,
    /// `--max-concurrency`, kept for the HTTP/2 stream limit.
    max_concurrency: u32,
    /// `--max-batch`: entity keys per request.
    max_batch: u32,
    /// `--max-body-bytes`.
    max_body_bytes: u64,
    /// `--max-connections` and `--idle-timeout-ms`, for the accept loop.
    connections: (usize, Duration),
}

impl Reader {
    /// Builds the reader from its configuration. Does not connect to Redis yet (see `Store`);
    /// fails only on unusable Redis flags (malformed URL, unreadable CA file, ...).
    pub fn new(config: &Config) -> Result<Self, ferry_redis::SetupError> {
        let metrics = Arc::new(Metrics::default());
        let target = config.redis.target()?;
        Ok(Self {
            store: Store::new(target, config.redis_timeout(), metrics.clone())?,
            health: Health::default(),
            metrics,
            permits: Semaphore::new(config.max_concurrency as usize),
            body_memory: Semaphore::new(config.body_memory()),
            max_concurrency: config.max_concurrency,
            max_batch: config.max_batch,
            max_body_bytes: config.max_body_bytes,
            connections: (
                usize::try_from(config.max_connections).unwrap_or(usize::MAX),
                config.idle_timeout(),
            ),
        })
    }

    /// Redis as the reader sees it.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// `--max-concurrency`.
    pub fn max_concurrency(&self) -> u32 {
        self.max_concurrency
    }

    /// `--max-connections` and `--idle-timeout-ms`.
    pub fn connections(&self) -> (usize, Duration) {
        self.connections
    }

    /// Answers one request; never fails (errors become JSON responses) and counts every answer.
    pub async fn handle<B>(&self, request: Request<B>) -> Response<Full<Bytes>>
    where
        B: Body,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let start = Instant::now();
        let route = match request.uri().path() {
            READER_PATH => Route::Vectors,
            "/healthz" => Route::Healthz,
            "/readyz" => Route::Readyz,
            "/metrics" => Route::Metrics,
            _ => Route::Other,
        };
        let result = match route {
            Route::Vectors => self.vectors(request).await,
            Route::Healthz => match allow(&request, Method::GET) {
                Ok(()) => Ok(self.health.healthz(&self.store).await),
                Err(e) => Err(e),
            },
            Route::Readyz => match allow(&request, Method::GET) {
                Ok(()) => {
                    let query = request.uri().query();
                    self.health.readyz(&self.store, query).await
                }
                Err(e) => Err(e),
            },
            Route::Metrics => allow(&request, Method::GET).map(|()| self.metrics_text()),
            Route::Other => Err(ReaderError::NotFound(request.uri().path().to_string())),
        };
        let response = match result {
            Ok(response) => response,
            Err(ReaderError::Internal(why)) => {
                // Cannot happen by construction, so it is worth a line each time it does.
                tracing::error!(%why, "internal error");
                ReaderError::Internal(why).into_response()
            }
            Err(e) => e.into_response(),
        };
        self.metrics
            .request(route, response.status(), start.elapsed());
        response
    }

    /// `POST /v1/vectors`: one `VectorRequest` in, one `MGET`, one `VectorResponse` out.
    async fn vectors<B>(&self, request: Request<B>) -> Result<Response<Full<Bytes>>, ReaderError>
    where
        B: Body,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        allow(&request, Method::POST)?;
        // The body first, charged to the memory budget as its bytes arrive; the Redis slot only
        // once it is all here, so clients that send slowly cannot keep it from the others.
        let (body, _memory) = self.read_body(request).await?;
        let response = self.lookup(body).await?;
        let mut http = Response::new(Full::new(response));
        http.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static(PROTOBUF_CONTENT_TYPE),
        );
        Ok(http)
    }

    /// One encoded `VectorRequest` in, one Redis round trip, the encoded `VectorResponse` out:
    /// what `POST /v1/vectors` answers, without HTTP (the native module's in-process reader
    /// calls it directly). A body over `--max-body-bytes` is refused; otherwise waits for one
    /// of the `--max-concurrency` Redis slots.
    pub async fn lookup(&self, body: impl Buf) -> Result<Bytes, ReaderError> {
        self.lookup_marked(body, |_| {}).await
    }

    /// `lookup`, telling `mark` when each step of it ends (the native module's per-stage
    /// timers: what is the Redis round trip and what is the reader's own work).
    pub async fn lookup_marked(
        &self,
        body: impl Buf,
        mut mark: impl FnMut(LookupStep),
    ) -> Result<Bytes, ReaderError> {
        if body.remaining() as u64 > self.max_body_bytes {
            return Err(ReaderError::BodyTooLarge {
                max: self.max_body_bytes,
            });
        }
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| ReaderError::Internal("concurrency semaphore closed".into()))?;
        let batch = Batch::decode(body, self.max_batch)?;
        mark(LookupStep::Decoded);
        let values = match (batch.command(), batch.pipeline()) {
            (Some(command), _) => self.store.mget(command).await?,
            (None, Some(pipeline)) => self.store.pipeline(pipeline).await?,
            (None, None) => Vec::new(),
        };
        mark(LookupStep::Fetched);
        let (response, found, refused) = batch.respond(values)?;
        self.metrics.keys(batch.keys(), found);
        if refused > 0 {
            self.metrics.schema_refused(refused);
        }
        Ok(Bytes::from(response.encode_to_vec()))
    }

    /// Reads the body, refusing it up front when its declared length is over the limit and
    /// capping what is read when no length was declared (HTTP/2, chunked). Each chunk is
    /// charged to the body memory budget when it arrives (what is returned holds the charge):
    /// a client that announces a large body and sends a few bytes holds a few bytes of it.
    async fn read_body<B>(
        &self,
        request: Request<B>,
    ) -> Result<(impl Buf, Option<SemaphorePermit<'_>>), ReaderError>
    where
        B: Body,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let too_large = ReaderError::BodyTooLarge {
            max: self.max_body_bytes,
        };
        let declared = request
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|len| len > self.max_body_bytes) {
            return Err(too_large);
        }
        let limit = usize::try_from(self.max_body_bytes).unwrap_or(usize::MAX);
        let body = Limited::new(request.into_body(), limit);
        tokio::pin!(body);
        let mut chunks = BytesMut::new();
        let mut charge: Option<SemaphorePermit<'_>> = None;
        let read = async {
            while let Some(frame) = body.frame().await {
                let Ok(data) = frame?.into_data() else {
                    continue; // trailers carry nothing the reader reads
                };
                let bytes = u32::try_from(data.remaining()).unwrap_or(u32::MAX);
                let permit = self
                    .body_memory
                    .acquire_many(bytes)
                    .await
                    .map_err(|_| "body memory semaphore closed")?;
                match charge.as_mut() {
                    Some(held) => held.merge(permit),
                    None => charge = Some(permit),
                }
                chunks.put(data);
            }
            Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
        };
        match tokio::time::timeout(BODY_READ_TIMEOUT, read).await {
            Ok(Ok(())) => Ok((chunks.freeze(), charge)),
            Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large),
            Ok(Err(e)) => Err(ReaderError::BadRequest(format!(
                "could not read the request body: {e}"
            ))),
            Err(_) => Err(ReaderError::BadRequest(format!(
                "request body not received within {} s",
                BODY_READ_TIMEOUT.as_secs()
            ))),
        }
    }

    /// `GET /metrics`.
    fn metrics_text(&self) -> Response<Full<Bytes>> {
        let text = self.metrics.render(self.store.is_up());
        let mut response = Response::new(Full::new(Bytes::from(text)));
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
        );
        response
    }
}

/// Each endpoint answers one method; anything else is 405 with `Allow`.
fn allow<B>(request: &Request<B>, method: Method) -> Result<(), ReaderError> {
    if request.method() == method {
        return Ok(());
    }
    let allow = if method == Method::POST {
        "POST"
    } else {
        "GET"
    };
    Err(ReaderError::MethodNotAllowed {
        method: request.method().to_string(),
        allow,
    })
}
