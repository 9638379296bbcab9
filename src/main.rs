//! The `ddl` command line.

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};

use ddl::gpu::{BackendChoice, Gpu, GpuOptions};

#[derive(Parser)]
#[command(
    name = "ddl",
    version,
    about = "Train, run and explain Deep Delta Learning language models on any GPU (wgpu)"
)]
struct Cli {
    #[command(flatten)]
    device: DeviceArgs,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Args, Clone)]
struct DeviceArgs {
    /// Graphics backend: vulkan, metal, dx12 or gl (default: the best adapter of any).
    #[arg(long, global = true, env = "DDL_BACKEND")]
    backend: Option<String>,
    /// Adapter index (as `ddl info` lists them) or a name substring.
    #[arg(long, global = true, env = "DDL_ADAPTER")]
    adapter: Option<String>,
}

impl DeviceArgs {
    fn open(&self) -> Result<std::sync::Arc<Gpu>> {
        let backend = self
            .backend
            .as_deref()
            .map(BackendChoice::parse)
            .transpose()?;
        Ok(Gpu::new(&GpuOptions {
            backend,
            adapter: self.adapter.clone(),
        })?)
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Adapters found, the chosen one, its backend, driver, features and limits.
    Info,
    /// Check the engine against PyTorch golden files (format ddl-golden-1): forward, backward,
    /// traces and AdamW steps, one row per compared tensor; exits non-zero on any failure.
    Golden {
        /// Golden files (e.g. tests/golden/*.safetensors).
        #[arg(required = true)]
        files: Vec<std::path::PathBuf>,
        /// Print only failing rows and the per-file summary.
        #[arg(long)]
        quiet: bool,
    },
    /// Benchmarks (results as a table, or JSON lines with --json).
    #[command(subcommand)]
    Bench(BenchCmd),
}

#[derive(Subcommand)]
enum BenchCmd {
    /// GFLOP/s of the matmul forms (A·B, A·Bᵀ, Aᵀ·B) for every tile variant.
    Matmul {
        /// Square sizes to run.
        #[arg(long, value_delimiter = ',', default_value = "128,256,512,1024")]
        sizes: Vec<usize>,
        /// Forms to run: nn, nt, tn.
        #[arg(long, value_delimiter = ',', default_value = "nn,nt,tn")]
        cases: Vec<String>,
        /// Timed repetitions per measurement (median reported).
        #[arg(long, default_value_t = 5)]
        reps: usize,
        /// Measure the best variant for each size and store it in the autotune cache.
        #[arg(long)]
        tune: bool,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Every kernel at the `shakespeare-char` shapes: time, GFLOP/s, GB/s against the copy floor.
    Kernels {
        /// Only kernels whose name contains one of these (comma-separated).
        #[arg(long, value_delimiter = ',')]
        filter: Vec<String>,
        #[arg(long, default_value_t = 5)]
        reps: usize,
        #[arg(long)]
        json: bool,
    },
    /// Device buffer copy bandwidth (the memory ceiling for bandwidth-bound kernels).
    Copy {
        /// Buffer size in MiB.
        #[arg(long, default_value_t = 64)]
        mib: usize,
        #[arg(long, default_value_t = 5)]
        reps: usize,
        #[arg(long)]
        json: bool,
    },
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::Info => info(&cli.device),
        Cmd::Bench(b) => bench(&cli.device, b),
        Cmd::Golden { files, quiet } => golden(&cli.device, &files, quiet),
    }
}

fn info(dev: &DeviceArgs) -> Result<()> {
    let backend = dev
        .backend
        .as_deref()
        .map(BackendChoice::parse)
        .transpose()?;
    let adapters = ddl::gpu::enumerate_adapters(backend);
    println!("adapters found: {}", adapters.len());
    for a in &adapters {
        println!("  {a}");
    }
    let gpu = dev.open().context("opening the GPU")?;
    println!("\nchosen:");
    print!("{}", gpu.describe());
    Ok(())
}

fn golden(dev: &DeviceArgs, files: &[std::path::PathBuf], quiet: bool) -> Result<()> {
    let gpu = dev.open().context("opening the GPU")?;
    let mut failed_files = Vec::new();
    for f in files {
        let result = ddl::golden::Golden::load(f).and_then(|g| {
            let rows = ddl::golden::check(&gpu, &g)?;
            Ok((g, rows))
        });
        match result {
            Err(e) => {
                eprintln!("error: {e}");
                failed_files.push(f.display().to_string());
            }
            Ok((g, rows)) => {
                let fails = rows.iter().filter(|r| !r.pass).count();
                println!(
                    "== {} (variant {}, V {}, d {}, L {}, H {}, h {}, d_v {}, B {}, T {})",
                    f.display(),
                    g.config.variant,
                    g.config.vocab_size,
                    g.config.d_model,
                    g.config.n_layers,
                    g.config.n_heads,
                    g.config.head_dim,
                    g.config.d_v,
                    g.batch,
                    g.seq_len
                );
                println!(
                    "{:<44} {:>10} {:>10} {:>8}  result",
                    "tensor", "rel_l2", "max_abs", "tol"
                );
                for r in rows.iter().filter(|r| !quiet || !r.pass) {
                    println!("{r}");
                }
                println!(
                    "{}: {} compared, {} failed\n",
                    f.display(),
                    rows.len(),
                    fails
                );
                if fails > 0 {
                    failed_files.push(f.display().to_string());
                }
            }
        }
    }
    if !failed_files.is_empty() {
        anyhow::bail!("golden parity failed for: {}", failed_files.join(", "));
    }
    Ok(())
}

fn print_row(row: &ddl::bench::Row, json: bool) {
    if json {
        println!("{}", row.0);
        return;
    }
    let v = &row.0;
    match v["bench"].as_str() {
        Some("matmul") => println!(
            "{:<4} {:>5}x{:<5}x{:<5} {:<4} {:>10.3} ms {:>9.2} GFLOP/s{}",
            v["case"].as_str().unwrap_or(""),
            v["m"],
            v["n"],
            v["k"],
            v["variant"].as_str().unwrap_or(""),
            v["ms"].as_f64().unwrap_or(0.0),
            v["gflop_per_s"].as_f64().unwrap_or(0.0),
            if v["auto"].as_bool() == Some(true) {
                "  <- auto"
            } else {
                ""
            }
        ),
        Some("copy") => println!(
            "copy {} MiB: {:.3} ms, {:.2} GB/s (read+write)",
            v["mib"],
            v["ms"].as_f64().unwrap_or(0.0),
            v["gb_per_s"].as_f64().unwrap_or(0.0)
        ),
        Some("kernel") => println!(
            "{:<52} {:>10.3} {:>10.2} {:>10.2} {:>7.1}%",
            v["name"].as_str().unwrap_or(""),
            v["ms"].as_f64().unwrap_or(0.0),
            v["gflop_per_s"].as_f64().unwrap_or(0.0),
            v["gb_per_s"].as_f64().unwrap_or(0.0),
            100.0 * v["of_floor"].as_f64().unwrap_or(0.0)
        ),
        _ => println!("{v}"),
    }
}

fn bench(dev: &DeviceArgs, b: BenchCmd) -> Result<()> {
    let gpu = dev.open().context("opening the GPU")?;
    match b {
        BenchCmd::Matmul {
            sizes,
            cases,
            reps,
            tune,
            json,
        } => {
            if !json {
                println!(
                    "adapter: {} ({:?}), timing: {}",
                    gpu.info.name,
                    gpu.info.backend,
                    if gpu.has_timestamps() {
                        "GPU timestamps"
                    } else {
                        "host clock"
                    }
                );
            }
            if let Some(bad) = sizes.iter().find(|&&s| s == 0) {
                anyhow::bail!("--sizes: {bad} is not a valid size (must be ≥ 1)");
            }
            if let Some(bad) = cases
                .iter()
                .find(|c| !["nn", "nt", "tn"].contains(&c.as_str()))
            {
                anyhow::bail!("--cases: unknown form '{bad}' (expected nn, nt or tn)");
            }
            if tune {
                for &s in &sizes {
                    for (name, ctor) in ddl::bench::MATMUL_CASES
                        .iter()
                        .filter(|(n, _)| cases.iter().any(|c| c == n))
                    {
                        let v = ddl::kernels::matmul::autotune::tune(&gpu, &ctor(s, s, s))?;
                        if !json {
                            println!("tuned {name} {s}: {v}");
                        }
                    }
                }
            }
            let cases: Vec<&str> = cases.iter().map(|s| s.as_str()).collect();
            ddl::bench::matmul_rows(&gpu, &sizes, &cases, reps, |r| print_row(&r, json))?;
        }
        BenchCmd::Kernels { filter, reps, json } => {
            let copy = ddl::bench::copy_bandwidth(&gpu, 64, 3)?;
            let gbs = copy.0["gb_per_s"].as_f64().unwrap_or(1.0);
            if !json {
                println!(
                    "adapter: {} ({:?}); copy bandwidth {gbs:.2} GB/s is the byte floor",
                    gpu.info.name, gpu.info.backend
                );
                println!(
                    "{:<52} {:>10} {:>10} {:>10} {:>8}",
                    "kernel", "ms", "GFLOP/s", "GB/s", "floor%"
                );
            } else {
                print_row(&copy, true);
            }
            for (_, f) in ddl::kernels::BENCHES {
                let cases: Vec<_> = f(&gpu)?
                    .into_iter()
                    .filter(|c| {
                        filter.is_empty() || filter.iter().any(|x| c.name.contains(x.as_str()))
                    })
                    .collect();
                ddl::bench::kernel_rows(&gpu, cases, reps, gbs, |r| print_row(&r, json))?;
            }
        }
        BenchCmd::Copy { mib, reps, json } => {
            let r = ddl::bench::copy_bandwidth(&gpu, mib, reps)?;
            print_row(&r, json);
        }
    }
    Ok(())
}
