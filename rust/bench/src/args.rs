//! `clonestage bench`'s arguments (clap derives them; the CLI embeds `BenchArgs` as its
//! `bench` subcommand) and the `--shape` list they name.

use crate::shapes::{self, Shape};
use anyhow::{Context, Result};
use std::path::PathBuf;

/// When to measure under background write load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Loaded {
    /// Where the filesystem clones whole trees by snapshot (btrfs).
    Auto,
    Always,
    Never,
}

/// Compare clonestage's stage with raw per-file hardlink, reflink, copy and symlink forests.
///
/// Works in a fresh `.clonestage-bench-<pid>` directory inside DIR, with its own caches
/// there (the global `--cache` is not used), and removes it at the end.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// A directory on the filesystem to measure [default: the current directory]
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// small_flat, pcm_cluster, deep_nested, medium_flat, large_flat (comma-separated), or all
    #[arg(long, value_name = "NAME|all", default_value = "all")]
    pub shape: String,
    /// One JSON object per line instead of a table
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON lines to FILE (with the table on stdout: one run, both forms)
    #[arg(long, value_name = "FILE")]
    pub json_out: Option<PathBuf>,
    /// Timed repetitions per method (at most)
    #[arg(long, default_value_t = 11, value_name = "N")]
    pub runs: usize,
    /// Timed repetitions per method (at least, whatever the budget)
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub min_runs: usize,
    /// Seconds per shape after which no new repetition starts (once --min-runs are done)
    #[arg(long, default_value_t = 20.0, value_name = "SECS")]
    pub budget: f64,
    /// Timed repetitions of raw copy (at most)
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub copy_runs: usize,
    /// Threads for the raw per-file methods
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub threads: usize,
    /// Time only raw hardlink and reflink at each of --sweep-threads (per shape)
    #[arg(long)]
    pub parallel_sweep: bool,
    /// Thread counts for --parallel-sweep
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2,4,8",
        value_name = "N,N,..."
    )]
    pub sweep_threads: Vec<usize>,
    /// Also measure under background writes
    #[arg(long, value_enum, default_value = "auto")]
    pub loaded: Loaded,
    /// Background load: MiB of 64 KiB files kept (new ones created, oldest removed)
    #[arg(long, default_value_t = 64, value_name = "MIB")]
    pub load_mib: u64,
    /// Background load: MiB/s of new files (0: as fast as one thread can)
    #[arg(long, default_value_t = 64, value_name = "MIB_S")]
    pub load_rate: u64,
    /// Keep the work directory
    #[arg(long)]
    pub keep: bool,
    /// Instead: stage each shape with four Mach-O code files under --preserve-inodes macho
    /// and none, side by side (cold and warm, alternating order)
    #[arg(long)]
    pub preserve_inodes_compare: bool,
}

pub fn select_shapes(spec: &str) -> Result<Vec<Shape>> {
    if spec == "all" {
        return Ok(shapes::SHAPES.to_vec());
    }
    spec.split(',')
        .map(|n| {
            Shape::by_name(n.trim()).with_context(|| {
                let names: Vec<_> = shapes::SHAPES.iter().map(|s| s.name).collect();
                format!("unknown shape '{n}' (known: {}, all)", names.join(", "))
            })
        })
        .collect()
}
