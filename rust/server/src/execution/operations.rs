//! Operations: one per Execute, named `operations/<server id>-<n>`, holding the latest
//! `google.longrunning.Operation` in a watch channel. Execute streams it; WaitExecution
//! attaches another stream to a running (or recently finished) operation, which is what Bazel
//! does after its Execute stream breaks. Finished operations are kept for `KEEP_FINISHED`.
//!
//! Each operation has an `ActionControl` that cancels its action: on shutdown, and when every
//! stream watching it has been gone for `ABANDON_GRACE` (the client was interrupted and did
//! not come back with WaitExecution), so an abandoned action does not run to its timeout.

use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use bazel_remote_apis::google::longrunning::{operation, Operation};
use bazel_remote_apis::google::protobuf::Any;
use clonestage_engine::Digest;
use prost::Message;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

pub const KEEP_FINISHED: Duration = Duration::from_secs(10 * 60);
pub const ABANDON_GRACE: Duration = Duration::from_secs(10);
/// The first message of a stream waits this long for the operation to finish, so that a short
/// action's client receives one message (its result) rather than every stage it went through.
pub const FIRST_UPDATE_AFTER: Duration = Duration::from_millis(100);
/// An unchanged operation is sent again this often, so idle-stream timeouts never fire.
pub const RESEND_EVERY: Duration = Duration::from_secs(30);

pub const METADATA_TYPE: &str =
    "type.googleapis.com/build.bazel.remote.execution.v2.ExecuteOperationMetadata";
pub const RESPONSE_TYPE: &str =
    "type.googleapis.com/build.bazel.remote.execution.v2.ExecuteResponse";

/// Cancels one action: a flag checked between steps, and SIGTERM to its running wrapper (which
/// forwards it to the command's process group and escalates to SIGKILL after the kill delay).
pub(crate) struct ActionControl {
    cancelled: watch::Sender<bool>,
    pid: Mutex<Option<i32>>,
}

impl ActionControl {
    fn new() -> ActionControl {
        ActionControl {
            cancelled: watch::channel(false).0,
            pid: Mutex::new(None),
        }
    }

    pub fn cancel(&self, why: &str) {
        if !self.cancelled.send_replace(true) {
            tracing::info!(reason = why, "cancelling action");
        }
        if let Some(pid) = *self.pid.lock().unwrap() {
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
    }

    pub fn is_cancelled(&self) -> bool {
        *self.cancelled.borrow()
    }

    /// Resolves once `cancel` was called.
    pub async fn cancelled(&self) {
        let mut rx = self.cancelled.subscribe();
        let _ = rx.wait_for(|c| *c).await;
    }

    /// Record the running wrapper's pid (None once it has exited and before it is reaped, so
    /// a signal never reaches a recycled pid). A cancel that came first is applied at once.
    pub fn set_pid(&self, pid: Option<i32>) {
        let mut g = self.pid.lock().unwrap();
        *g = pid;
        if let (Some(pid), true) = (pid, self.is_cancelled()) {
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
    }
}

pub(crate) struct Op {
    pub name: String,
    pub action: Digest,
    pub control: ActionControl,
    state: watch::Sender<Operation>,
    finished: Mutex<Option<Instant>>,
}

fn any<M: Message>(type_url: &str, m: &M) -> Any {
    Any {
        type_url: type_url.into(),
        value: m.encode_to_vec(),
    }
}

impl Op {
    fn operation(
        &self,
        stage: pb::execution_stage::Value,
        response: Option<&pb::ExecuteResponse>,
    ) -> Operation {
        let meta = pb::ExecuteOperationMetadata {
            stage: stage as i32,
            action_digest: Some(self.action.to_proto()),
            digest_function: pb::digest_function::Value::Sha256 as i32,
            ..Default::default()
        };
        Operation {
            name: self.name.clone(),
            metadata: Some(any(METADATA_TYPE, &meta)),
            done: response.is_some(),
            result: response.map(|r| operation::Result::Response(any(RESPONSE_TYPE, r))),
        }
    }

    pub fn set_stage(&self, stage: pb::execution_stage::Value) {
        self.state.send_replace(self.operation(stage, None));
    }

    pub fn finish(&self, response: &pb::ExecuteResponse) {
        *self.finished.lock().unwrap() = Some(Instant::now());
        self.state
            .send_replace(self.operation(pb::execution_stage::Value::Completed, Some(response)));
    }

    pub fn is_done(&self) -> bool {
        self.state.borrow().done
    }

    /// A stream of this operation's states, ending after the one marked done.
    pub fn subscribe(self: &Arc<Self>) -> ReceiverStream<Result<Operation, Status>> {
        let (tx, out) = tokio::sync::mpsc::channel(4);
        let mut rx = self.state.subscribe();
        let op = self.clone();
        tokio::spawn(async move {
            // Every streamed message costs the client a wake-up (Bazel 4.2.3 blocks a thread
            // on the stream); an action that ends quickly gets its final state only.
            if !rx.borrow().done {
                tokio::select! {
                    _ = rx.wait_for(|o| o.done) => {}
                    _ = tokio::time::sleep(FIRST_UPDATE_AFTER) => {}
                    _ = tx.closed() => {}
                }
            }
            loop {
                let current = rx.borrow_and_update().clone();
                let done = current.done;
                if tx.send(Ok(current)).await.is_err() {
                    break; // the client went away
                }
                if done {
                    return;
                }
                tokio::select! {
                    changed = rx.changed() => if changed.is_err() { return },
                    _ = tokio::time::sleep(RESEND_EVERY) => {}
                    _ = tx.closed() => break,
                }
            }
            drop(rx);
            if op.state.receiver_count() == 0 && !op.is_done() {
                tokio::time::sleep(ABANDON_GRACE).await;
                if op.state.receiver_count() == 0 && !op.is_done() {
                    op.control
                        .cancel("no client is waiting for the operation any more");
                }
            }
        });
        ReceiverStream::new(out)
    }
}

pub(crate) struct Operations {
    map: Mutex<HashMap<String, Arc<Op>>>,
    prefix: String,
    seq: AtomicU64,
}

impl Operations {
    pub fn new(prefix: String) -> Operations {
        Operations {
            map: Mutex::new(HashMap::new()),
            prefix,
            seq: AtomicU64::new(0),
        }
    }

    pub fn create(&self, action: Digest) -> Arc<Op> {
        let name = format!(
            "operations/{}-{}",
            self.prefix,
            self.seq.fetch_add(1, Ordering::Relaxed)
        );
        let (state, _) = watch::channel(Operation::default());
        let op = Arc::new(Op {
            name: name.clone(),
            action,
            control: ActionControl::new(),
            state,
            finished: Mutex::new(None),
        });
        op.set_stage(pb::execution_stage::Value::CacheCheck);
        let mut map = self.map.lock().unwrap();
        map.retain(|_, o| {
            o.finished
                .lock()
                .unwrap()
                .is_none_or(|t| t.elapsed() < KEEP_FINISHED)
        });
        map.insert(name, op.clone());
        op
    }

    pub fn get(&self, name: &str) -> Option<Arc<Op>> {
        self.map.lock().unwrap().get(name).cloned()
    }

    /// Operations not finished yet.
    pub fn unfinished(&self) -> usize {
        self.map
            .lock()
            .unwrap()
            .values()
            .filter(|o| !o.is_done())
            .count()
    }

    pub fn cancel_all(&self, why: &str) {
        for op in self.map.lock().unwrap().values().filter(|o| !o.is_done()) {
            op.control.cancel(why);
        }
    }
}
