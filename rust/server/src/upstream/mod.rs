//! A team's REAPI cache behind this server (issue 14, docs/upstream.md): `config` (flags, URL,
//! auth file), `credentials` (headers, the credential helper), `client` (the channel and the
//! calls), `breaker` (stop asking a failing upstream for a while), `read_through` (a local
//! miss asks the upstream; what it names is checked, then fetched and verified into the local
//! cache by `fetch`) and
//! `write_behind` (results executed here go upstream from a bounded persistent queue, off the
//! response's path; `upload` is one upload). `Upstream` ties them and counts into the stager's ledger (the
//! `upstream_*` counters of `clonestage stats`, absent without `--upstream`).

mod breaker;
mod client;
pub(crate) mod config;
mod credentials;
mod fetch;
mod read_through;
mod tls;
mod upload;
mod write_behind;

pub use config::{UpstreamOptions, WriteMode};

use crate::ac_store::AcStore;
use clonestage_engine::ledger::Ledger;
use clonestage_engine::{Cache, Digest};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub(crate) struct Upstream {
    pub opts: UpstreamOptions,
    client: client::Client,
    breaker: breaker::Breaker,
    ledger: Arc<Ledger>,
    cache: Arc<Cache>,
    queue: write_behind::Queue,
    /// Whether the last read call failed (so only the first failure of a run warns).
    warned: AtomicBool,
    /// Some read was answered since start: the connection is up, so a small call that takes
    /// longer than the timeout is a stall (before that, connecting shares its bound).
    answered: AtomicBool,
    /// Actions the upstream did not have a moment ago (`read_through::RECENT_MISS`): Bazel's
    /// Execute right after its GetActionResult does not ask twice.
    recent_misses: std::sync::Mutex<std::collections::HashMap<Digest, std::time::Instant>>,
}

impl Upstream {
    /// Check the options (URL, auth file), run the credential helper once and open the
    /// write-behind queue under `<cache>/upstream/queue`. Nothing is dialled yet.
    pub fn new(
        opts: UpstreamOptions,
        cache: Arc<Cache>,
        ledger: Arc<Ledger>,
    ) -> anyhow::Result<Arc<Upstream>> {
        let uri = config::endpoint_uri(&opts.url)?;
        let fixed = match &opts.auth_file {
            Some(p) => config::read_auth_file(p)?,
            None => Vec::new(),
        };
        let creds = Arc::new(credentials::Credentials::new(
            fixed,
            opts.auth_helper.clone(),
            &opts.url,
        ));
        // At start, so a broken helper shows in the server's first lines.
        let _ = creds.headers();
        let client = client::Client::new(&uri, &opts.instance, creds, opts.timeout)?;
        let queue = write_behind::Queue::open(&cache, opts.queue_max)?;
        Ok(Arc::new(Upstream {
            opts,
            client,
            breaker: breaker::Breaker::default(),
            ledger,
            cache,
            queue,
            warned: AtomicBool::new(false),
            answered: AtomicBool::new(false),
            recent_misses: Default::default(),
        }))
    }

    fn count(&self, key: &str) {
        self.ledger.count(key);
    }

    fn add(&self, key: &str, n: u64) {
        self.ledger
            .add(|c| *c.extra.entry(key.to_string()).or_default() += n);
    }

    /// A read call failed: counted, fed to the breaker, warned about once per bad period.
    fn read_failed(&self, what: &str, error: &str) {
        self.failed(what, error, self.breaker.failure());
    }

    /// A read got no answer within its bound: as `read_failed`, and the breaker opens at once.
    fn read_stalled(&self, what: &str, error: &str) {
        self.failed(what, error, self.breaker.stall());
    }

    fn failed(&self, what: &str, error: &str, f: breaker::Failed) {
        self.count(server_counters::UPSTREAM_ERRORS);
        if f.opened {
            self.count(server_counters::UPSTREAM_BREAKER_OPENS);
        }
        if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(upstream = %self.opts.url, error, "the upstream cache failed ({what}); builds go on locally, and after {} failures in a row, or one without an answer, it is not asked for {:?}", breaker::TRIP, breaker::OPEN_FOR);
        }
        if f.opened {
            tracing::info!(upstream = %self.opts.url, "upstream breaker open for {:?}", breaker::OPEN_FOR);
        }
    }

    fn read_ok(&self) {
        self.answered.store(true, Ordering::Relaxed);
        self.breaker.success();
        if self.warned.swap(false, Ordering::Relaxed) {
            tracing::info!(upstream = %self.opts.url, "the upstream cache answers again");
        }
    }

    /// How long GetActionResult may take: the timeout, or twice that while no read has been
    /// answered yet (the first call also connects, e.g. a TLS handshake far away).
    fn ask_bound(&self) -> Duration {
        if self.answered.load(Ordering::Relaxed) {
            self.opts.timeout
        } else {
            self.opts.timeout * 2
        }
    }

    /// The deadline of one lookup (the result and its blobs together).
    fn lookup_deadline(&self) -> Duration {
        self.opts.timeout * 2
    }

    /// Local miss of `action`: the upstream's result, once every blob it names is in the local
    /// cache, stored in `ac`. None on a miss, an error, a lie or with the breaker open.
    pub async fn lookup(&self, ac: &AcStore, action: Digest) -> Option<pb::ActionResult> {
        read_through::lookup(self, ac, action).await
    }

    /// Fetch `missing` (blobs an Execute needs) into the local cache, verified; how many
    /// arrived. Bounded by the lookup deadline.
    pub async fn fetch_inputs(&self, missing: &[Digest]) -> usize {
        read_through::fetch_inputs(self, missing).await
    }

    /// From the blocking pool: `lookup` on the runtime `rt`.
    pub fn lookup_blocking(
        &self,
        rt: &tokio::runtime::Handle,
        ac: &AcStore,
        action: Digest,
    ) -> Option<pb::ActionResult> {
        rt.block_on(self.lookup(ac, action))
    }

    /// Queue `action`'s stored result for upload (never waits on the network).
    pub fn enqueue(&self, action: Digest, result: &pb::ActionResult) {
        write_behind::enqueue(self, action, result);
    }

    /// Start the uploader on the current runtime.
    pub fn start_uploader(self: &Arc<Self>, ac: Arc<AcStore>) {
        write_behind::start(self.clone(), ac);
    }

    /// Let the uploader finish what it can within `grace`; the rest stays queued.
    pub async fn drain(&self, grace: Duration) {
        write_behind::drain(self, grace).await;
    }

    /// Entries waiting in the queue of the cache at `cache_root` (the `upstream_queue_len`
    /// gauge of `clonestage stats`); None when the cache has no queue.
    pub fn queue_len(cache_root: &Path) -> Option<u64> {
        write_behind::queue_len(cache_root)
    }
}

use crate::server_counters;
use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
