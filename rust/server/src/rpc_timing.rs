//! A tower layer that logs every RPC's method and server-side time at DEBUG
//! (`CLONESTAGE_LOG=clonestage_server::rpc_timing=debug`): where a client's round trips go.
//! For streaming responses the time is until the response headers, i.e. the handler returned.
//! Costs one `Instant::now` and a boxed future per request.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;
use tonic::codegen::http;

#[derive(Clone, Copy, Default)]
pub(crate) struct RpcTimingLayer;

impl<S> tower::Layer<S> for RpcTimingLayer {
    type Service = RpcTiming<S>;
    fn layer(&self, inner: S) -> RpcTiming<S> {
        RpcTiming(inner)
    }
}

#[derive(Clone)]
pub(crate) struct RpcTiming<S>(S);

impl<S, B> tower::Service<http::Request<B>> for RpcTiming<S>
where
    S: tower::Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if !tracing::enabled!(tracing::Level::DEBUG) {
            return Box::pin(self.0.call(req));
        }
        let path = req.uri().path().to_owned();
        let t0 = Instant::now();
        let fut = self.0.call(req);
        Box::pin(async move {
            let r = fut.await;
            tracing::debug!(rpc = %path, us = t0.elapsed().as_micros() as u64, "rpc");
            r
        })
    }
}
