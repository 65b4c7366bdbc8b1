//! ActionCache: GetActionResult serves results from `ac_store` (only those whose blobs are
//! all present); UpdateActionResult stores results clients computed themselves (Bazel's
//! `--remote_upload_local_results`), after checking that their output lists are well-formed
//! (INVALID_ARGUMENT otherwise) and that the blobs they name were uploaded.
//! Lookups count as `action_cache_hits` / `action_cache_misses` in `clonestage stats`.
//! With an upstream (`upstream`), a local miss asks it (read-through), and with
//! `--upstream-write all` an updated result is queued for upload too.

use crate::failure::{blocking, check_digest_function, digest_arg, Failure};
use crate::inline_std::inline_std;
use crate::server_counters;
use crate::state::State;
use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use pb::action_cache_server::ActionCache;
use std::sync::Arc;
use tonic::{Request, Response, Status};

pub(crate) struct ActionCacheService {
    pub state: Arc<State>,
}

#[tonic::async_trait]
impl ActionCache for ActionCacheService {
    async fn get_action_result(
        &self,
        request: Request<pb::GetActionResultRequest>,
    ) -> Result<Response<pb::ActionResult>, Status> {
        let req = request.into_inner();
        check_digest_function(req.digest_function)?;
        let d = digest_arg(req.action_digest.as_ref(), "action_digest")?;
        let (so, se) = (req.inline_stdout, req.inline_stderr);
        // Most lookups are misses of new actions: one stat, answered without a thread hop.
        if self.state.ac.has_entry(&d) {
            let state = self.state.clone();
            let r = blocking(move || {
                let r = state.ac.get(&state.cache, &d)?;
                // Its blobs held for the client (`answer_grace`); one gone makes it a miss.
                let r = r.filter(|r| crate::answer_grace::hold(&state.cache, r).is_ok());
                Ok(r.map(|mut r| {
                    inline_std(&state.cache, &mut r, so, se);
                    r
                }))
            })
            .await?;
            if let Some(r) = r {
                self.state.count(server_counters::ACTION_CACHE_HITS);
                return Ok(Response::new(r));
            }
        }
        self.state.count(server_counters::ACTION_CACHE_MISSES);
        // A local miss asks the team's cache (bounded; nothing with its breaker open).
        if let Some(up) = &self.state.upstream {
            if let Some(r) = up.lookup(&self.state.ac, d).await {
                let state = self.state.clone();
                let r = blocking(move || {
                    Ok(crate::answer_grace::hold(&state.cache, &r)
                        .is_ok()
                        .then(|| {
                            let mut r = r;
                            inline_std(&state.cache, &mut r, so, se);
                            r
                        }))
                })
                .await?;
                if let Some(r) = r {
                    return Ok(Response::new(r));
                }
            }
        }
        Err(Status::not_found(format!("no action result for {d}")))
    }

    async fn update_action_result(
        &self,
        request: Request<pb::UpdateActionResultRequest>,
    ) -> Result<Response<pb::ActionResult>, Status> {
        let req = request.into_inner();
        check_digest_function(req.digest_function)?;
        let d = digest_arg(req.action_digest.as_ref(), "action_digest")?;
        let Some(mut result) = req.action_result else {
            return Err(Failure::InvalidArgument("action_result missing".into()).into());
        };
        // Output lists REAPI forbids (a path twice, `..`, absolute) are refused, as Execute
        // refuses them in a Command (`checks::result_check::check_lists`).
        crate::checks::result_check::check_lists(&result)
            .map_err(|why| Failure::InvalidArgument(format!("action_result for {d}: {why}")))?;
        // Inline bytes are not part of a stored result.
        result.stdout_raw.clear();
        result.stderr_raw.clear();
        for f in &mut result.output_files {
            f.contents.clear();
        }
        let state = self.state.clone();
        let stored = blocking(move || {
            if let Some(m) = crate::ac_store::first_missing_blob(&state.cache, &result) {
                return Err(Failure::Missing {
                    digests: vec![m],
                    what: format!("named by the action result for {d}"),
                });
            }
            state.ac.put(&d, &result)?;
            state.count(server_counters::ACTION_CACHE_UPDATES);
            Ok(result)
        })
        .await?;
        // Results Bazel ran itself go upstream only when the user allows it.
        if let Some(up) = self
            .state
            .upstream
            .clone()
            .filter(|u| u.opts.write == crate::upstream::WriteMode::All)
        {
            let r = stored.clone();
            self.state.background(move |_| up.enqueue(d, &r));
        }
        Ok(Response::new(stored))
    }
}
