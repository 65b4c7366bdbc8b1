//! What a valid action and a valid result are, checked in one place for every path that
//! takes one in: Execute (`execution`) and the team cache's read-through (`upstream`).
//!
//! - `action`: an Execute request's Action and Command, loaded and checked before anything is
//!   staged (`prepare`).
//! - `output_spec`: what the Command declares as outputs, and the output lists REAPI forbids.
//! - `result_check`: what an `ActionResult` must be to be stored or served, whoever made it.

pub(crate) mod action;
pub(crate) mod output_spec;
pub(crate) mod result_check;

pub(crate) use action::{prepare, Prepared};
