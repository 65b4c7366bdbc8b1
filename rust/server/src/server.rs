//! Starting and stopping the server. `start` opens the cache, takes the server lock, sweeps
//! what an earlier server left (work dirs, dead writers' temp files), binds both listeners
//! (TCP on the previous port when it is free), keeps or makes the token (`auth`), writes
//! `tcp.bazelrc`, serves every service on them (the TCP one behind the token check), and
//! writes `tcp-port` last, as the sign that the server is ready.
//!
//! Shutdown (`ServerHandle::shutdown`): stop accepting connections and new Executes, let
//! running actions finish for `grace`, then cancel the rest (their wrappers get SIGTERM, then
//! SIGKILL after the kill delay); every work dir is removed as its action ends, results of
//! cancelled actions are not recorded, so the cache stays consistent. The socket, `tcp-port`
//! and `tcp.bazelrc` are removed, queued upstream uploads get a few seconds
//! (the rest stays queued for the next server), and the lock is released last.

use crate::ac_store::AcStore;
use crate::action_cache_service::ActionCacheService;
use crate::auth::{self, TokenCheck};
use crate::bytestream::{ByteStreamService, UploadGauge, Uploads};
use crate::capabilities::{CapabilitiesService, MAX_MESSAGE_SIZE};
use crate::cas_service::CasService;
use crate::execution::{spawn, workdir, ExecState, ExecutionService};
use crate::layout::Layout;
use crate::listen;
use crate::rpc_timing::RpcTimingLayer;
use crate::server_lock::ServerLock;
use crate::state::{StagingOptions, State};
use crate::ServeOptions;
use anyhow::{Context, Result};
use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use bazel_remote_apis::google::bytestream::byte_stream_server::ByteStreamServer;
use clonestage_engine::Cache;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::service::{InterceptorLayer, Routes};
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;

/// How long SIGTERM lets running actions finish before cancelling them.
pub const DRAIN_GRACE: Duration = Duration::from_secs(10);

/// How long shutdown lets queued upstream uploads go on; the rest stays queued.
const UPLOAD_DRAIN: Duration = Duration::from_secs(3);

/// A running server. Dropping it without `shutdown` leaves the listeners running until the
/// runtime ends.
pub struct ServerHandle {
    state: Arc<State>,
    /// The execution service's own state: shutdown stops its janitor, pool and operations.
    exec: Arc<ExecState>,
    layout: Layout,
    tcp_port: u16,
    token: String,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<Result<(), tonic::transport::Error>>>,
    lock: ServerLock,
    evict: crate::eviction::Limits,
    /// ByteStream's upload sessions (`ServerHandle::uploads`).
    uploads: Uploads,
}

fn routes(state: &Arc<State>, exec: &Arc<ExecState>, uploads: &Uploads) -> Routes {
    macro_rules! svc {
        ($server:ty, $inner:expr) => {
            <$server>::new($inner)
                .max_decoding_message_size(MAX_MESSAGE_SIZE)
                .max_encoding_message_size(MAX_MESSAGE_SIZE)
        };
    }
    let mut b = Routes::builder();
    b.add_service(svc!(
        pb::capabilities_server::CapabilitiesServer<_>,
        CapabilitiesService
    ))
    .add_service(svc!(
        pb::content_addressable_storage_server::ContentAddressableStorageServer<_>,
        CasService {
            state: state.clone()
        }
    ))
    .add_service(svc!(
        ByteStreamServer<_>,
        ByteStreamService {
            state: state.clone(),
            uploads: uploads.clone(),
        }
    ))
    .add_service(svc!(
        pb::action_cache_server::ActionCacheServer<_>,
        ActionCacheService {
            state: state.clone()
        }
    ))
    .add_service(svc!(
        pb::execution_server::ExecutionServer<_>,
        ExecutionService {
            state: state.clone(),
            exec: exec.clone(),
        }
    ));
    b.routes()
}

fn builder() -> Server<tower::layer::util::Stack<RpcTimingLayer, tower::layer::util::Identity>> {
    Server::builder()
        .initial_stream_window_size(4 << 20)
        .initial_connection_window_size(16 << 20)
        .layer(RpcTimingLayer)
}

async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

fn write_atomically(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    std::fs::write(&tmp, text).with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("rename {} to {}", tmp.display(), path.display()))
}

/// Start serving `opts.cache_dir`; returns once both listeners accept requests.
pub async fn start(opts: ServeOptions) -> Result<ServerHandle> {
    // Bad patterns are refused before anything is touched.
    let shared_dirs = clonestage_engine::shared::Pattern::parse_list(&opts.shared_dirs)?;
    let cache = Arc::new(
        Cache::open(&opts.cache_dir)
            .with_context(|| format!("open cache {}", opts.cache_dir.display()))?,
    );
    let layout = Layout::new(cache.root());
    listen::server_dir(&layout.server_dir())?;
    let lock = ServerLock::acquire(&layout.lock())?;
    let _ = std::fs::remove_file(layout.tcp_port());
    // Before tcp-port (readiness): a launcher of another version that finds this server
    // ready reads this server's version, not a predecessor's, and restarts it with its own.
    write_atomically(&layout.version(), &format!("{}\n", crate::VERSION))?;
    let spawn = spawn::locate(opts.spawn.as_deref())?;

    let mut swept = 0;
    for dir in [layout.work_dir(), layout.work_making_dir()] {
        std::fs::create_dir_all(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
        swept += workdir::sweep(&dir);
    }
    let tmp = clonestage_engine::cas::sweep_dead_tmp(&cache);
    if swept + tmp > 0 {
        tracing::info!(
            work_dirs = swept,
            temp_files = tmp,
            "swept leftovers of an earlier server"
        );
    }
    let ac = AcStore::new(&layout.ac_dir())
        .with_context(|| format!("mkdir {}", layout.ac_dir().display()))?;
    let unix = listen::bind_unix(&layout.socket())?;
    let (tcp, same_port) = listen::bind_tcp_stable(&layout.last_port(), opts.port)?;
    let tcp_port = tcp.local_addr().context("local_addr")?.port();
    let token = auth::token_for_start(&layout.token(), same_port)?;
    auth::write_bazelrc(&layout.tcp_bazelrc(), &layout.cache, tcp_port, &token)?;

    let id = auth::random_hex(4)?;
    let exec = Arc::new(ExecState::new(
        spawn.clone(),
        opts.jobs,
        id,
        layout.work_dir(),
        layout.work_making_dir(),
    ));
    let state = Arc::new(State::new(
        cache,
        Arc::new(ac),
        exec.clone(),
        opts.upstream.clone(),
        StagingOptions {
            limits: opts.limits,
            pool_copies: opts.pool_copies,
            shared: shared_dirs,
            code: opts.code,
        },
    )?);
    match &state.upstream {
        Some(up) => {
            write_atomically(&layout.upstream(), &format!("{}\n", up.opts.describe()))?;
            up.start_uploader(state.ac.clone());
            tracing::info!(upstream = %up.opts.describe(), "upstream cache configured");
        }
        None => {
            let _ = std::fs::remove_file(layout.upstream());
        }
    }
    // The janitor also keeps work dirs ready and builds pooled copies while fewer actions run
    // than the job limit.
    exec.start_janitor(&state, opts.jobs)
        .context("start the work-dir janitor")?;
    state.ledger_flush.start();
    let evict = crate::eviction::Limits::new(
        opts.max_size
            .unwrap_or_else(|| crate::eviction::default_max_size(&layout.cache)),
        opts.evict_every.unwrap_or(crate::eviction::DEFAULT_EVERY),
    );
    crate::eviction::start(&state, evict).context("start the eviction thread")?;
    let uploads = Uploads::start();
    let routes = routes(&state, &exec, &uploads);
    let (stop, stop_rx) = watch::channel(false);
    let unix_server = builder()
        .add_routes(routes.clone())
        .serve_with_incoming_shutdown(UnixListenerStream::new(unix), stopped(stop_rx.clone()));
    let tcp_server = builder()
        .layer(InterceptorLayer::new(TokenCheck::new(&token)))
        .add_routes(routes)
        .serve_with_incoming_shutdown(
            TcpIncoming::from(tcp).with_nodelay(Some(true)),
            stopped(stop_rx),
        );
    let tasks = vec![tokio::spawn(unix_server), tokio::spawn(tcp_server)];

    write_atomically(&layout.tcp_port(), &crate::layout::tcp_port_text(tcp_port))?;
    tracing::info!(
        cache = %layout.cache.display(),
        socket = %layout.socket().display(),
        tcp_port,
        jobs = opts.jobs,
        spawn = %spawn.display(),
        "clonestage server ready"
    );
    Ok(ServerHandle {
        state,
        exec,
        layout,
        tcp_port,
        token,
        stop,
        tasks,
        lock,
        evict,
        uploads,
    })
}

impl ServerHandle {
    pub fn tcp_port(&self) -> u16 {
        self.tcp_port
    }

    pub fn socket(&self) -> PathBuf {
        self.layout.socket()
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    /// Run one eviction check now, as the background thread does (tests; see `eviction`).
    pub async fn evict_now(&self) -> Option<clonestage_engine::gc::GcReport> {
        let (state, limits) = (self.state.clone(), self.evict);
        tokio::task::spawn_blocking(move || crate::eviction::tick(&state, &limits))
            .await
            .ok()
            .flatten()
    }

    /// End the eviction grace of every result answered so far (`answer_grace`) now, as if its
    /// minute had passed (for tests of eviction).
    pub fn end_answer_grace(&self) {
        self.state.cache.release_holds();
    }

    /// What ByteStream's upload sessions hold now (tests; see `bytestream::uploads`).
    pub fn uploads(&self) -> UploadGauge {
        self.uploads.gauge()
    }

    /// Actions accepted and not finished yet.
    pub fn running_actions(&self) -> usize {
        self.state.busy()
    }

    /// Stop as described in the module doc. `force` resolving (e.g. a second SIGINT) cancels
    /// running actions at once.
    pub async fn shutdown(self, grace: Duration, force: impl Future<Output = ()>) -> Result<()> {
        let (state, exec) = (self.state.clone(), self.exec.clone());
        state.start_draining();
        exec.janitor.hurry();
        exec.prespawn.close();
        let _ = self.stop.send(true);
        tracing::info!(
            running = exec.ops.unfinished(),
            "shutting down: no new connections or actions"
        );
        let drained = async {
            let deadline = Instant::now() + grace;
            while state.busy() > 0 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::select! {
            _ = drained => {}
            _ = force => tracing::info!("second signal: cancelling running actions"),
        }
        if exec.ops.unfinished() > 0 {
            tracing::warn!(
                running = exec.ops.unfinished(),
                "cancelling actions still running"
            );
            exec.ops.cancel_all("the server is shutting down");
            let deadline = Instant::now() + Duration::from_secs(spawn::KILL_DELAY_SECS as u64 + 5);
            while state.busy() > 0 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        for t in self.tasks {
            match tokio::time::timeout(Duration::from_secs(5), t).await {
                Ok(Ok(Err(e))) => tracing::warn!(error = %e, "listener ended with an error"),
                Err(_) => tracing::warn!("a connection did not close in time; leaving it"),
                _ => {}
            }
        }
        let _ = std::fs::remove_file(self.layout.tcp_port());
        let _ = std::fs::remove_file(self.layout.tcp_bazelrc());
        let _ = std::fs::remove_file(self.layout.socket());
        let _ = tokio::task::spawn_blocking(move || {
            exec.prespawn.close_and_wait(Duration::from_secs(5))
        })
        .await;
        if let Some(up) = &state.upstream {
            up.drain(UPLOAD_DRAIN).await;
        }
        let _ = std::fs::remove_file(self.layout.upstream());
        // Whatever the last actions added, written before the next server can start.
        state.ledger_flush.flush_now().await;
        drop(self.lock);
        tracing::info!("clonestage server stopped");
        Ok(())
    }
}

/// SIGTERM and SIGINT, installed before the server starts so neither kills it outright.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("install SIGTERM handler")?,
            int: signal(SignalKind::interrupt()).context("install SIGINT handler")?,
        })
    }

    async fn next(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// `clonestage serve`: run until SIGTERM/SIGINT, then drain (a second signal cancels).
pub fn serve_blocking(opts: ServeOptions) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("clonestage-serve")
        .build()
        .context("start the async runtime")?;
    rt.block_on(async {
        let mut signals = Signals::install()?;
        let handle = start(opts).await?;
        signals.next().await;
        handle.shutdown(DRAIN_GRACE, signals.next()).await
    })
}
