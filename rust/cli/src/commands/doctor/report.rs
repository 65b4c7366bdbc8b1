//! One check's outcome and the two ways the doctor prints them: `--json` (`{"version": ...,
//! "checks": [{"name", "status", "detail", "ms"}]}`) and a short report to paste into a bug
//! report (one line per check, then the count of each status).

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Fail,
    Skip,
}

/// What a check found: its status and one paragraph saying what and why.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub status: Status,
    pub detail: String,
}

impl Outcome {
    pub fn pass(detail: impl Into<String>) -> Outcome {
        Outcome {
            status: Status::Pass,
            detail: detail.into(),
        }
    }

    pub fn fail(detail: impl Into<String>) -> Outcome {
        Outcome {
            status: Status::Fail,
            detail: detail.into(),
        }
    }

    pub fn skip(detail: impl Into<String>) -> Outcome {
        Outcome {
            status: Status::Skip,
            detail: detail.into(),
        }
    }
}

/// A check as reported.
#[derive(Debug, Clone, Serialize)]
pub struct Checked {
    pub name: &'static str,
    pub status: Status,
    pub detail: String,
    pub ms: u64,
}

#[derive(Serialize)]
struct Report<'a> {
    version: &'a str,
    checks: &'a [Checked],
}

pub fn json(checks: &[Checked]) -> String {
    serde_json::to_string_pretty(&Report {
        version: clonestage_server::VERSION,
        checks,
    })
    .expect("the report serializes")
}

pub fn human(checks: &[Checked], header: &str) -> String {
    let mut out = format!("{header}\n");
    for c in checks {
        let status = match c.status {
            Status::Pass => "pass",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
        };
        out.push_str(&format!(
            "{status} {:<10} {} ({} ms)\n",
            c.name, c.detail, c.ms
        ));
    }
    let count = |s: Status| checks.iter().filter(|c| c.status == s).count();
    out.push_str(&format!(
        "{} passed, {} failed, {} skipped\n",
        count(Status::Pass),
        count(Status::Fail),
        count(Status::Skip)
    ));
    out
}
