//! `serve`: the whole API in one process, for local development and tests.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use shared::serve::{self, Backend, ServeOptions};

#[derive(Clone, Copy, ValueEnum)]
enum BackendArg {
    Embedded,
    Aws,
}

/// Runs every endpoint of the video editing workflow service on one address.
#[derive(Parser)]
#[command(name = "serve", version)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:3000")]
    addr: SocketAddr,
    /// JSON file of organizations and API keys to load at start.
    #[arg(long)]
    seed: Option<PathBuf>,
    /// Folder for the state database (`state.sqlite`) and local media (uploads and outputs).
    #[arg(long, default_value = "data")]
    data_dir: PathBuf,
    /// Keep state in process memory, lost at exit (media still goes to the data folder).
    #[arg(long)]
    in_memory: bool,
    /// Base URL clients use to reach this server, for signed media URLs
    /// (default: http:// and the bound address).
    #[arg(long)]
    public_url: Option<String>,
    /// Where state lives: SQLite in the data folder, or DynamoDB and S3 at the standard AWS endpoint settings.
    #[arg(long, value_enum, default_value = "embedded")]
    backend: BackendArg,
    /// Node-task workers in this process (default: one per core).
    #[arg(long)]
    workers: Option<usize>,
    /// Longest one node task's media work may take, in seconds.
    #[arg(long, default_value_t = 900)]
    task_timeout: u64,
    /// Length of the segments a long edit's output is rendered in, in parallel, in
    /// seconds; 0 renders every output in one pass.
    #[arg(long, default_value_t = shared::config::DEFAULT_SEGMENT_SECONDS)]
    segment_seconds: u64,
    /// Whether URL inputs and webhook callbacks may reach private and loopback
    /// addresses (a receiver on this machine); `--allow-private-urls false` applies the
    /// SSRF guard of a deployment.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    allow_private_urls: bool,
    /// Make what the state needs and exit, serving nothing: with `--backend aws` the
    /// table, the bucket and the queues `TASK_QUEUE_URL` and `WEBHOOK_QUEUE_URL` name
    /// (serve's own when unset), then the seed file. The seed step of `sam local`
    /// (scripts/sam-local.sh).
    #[arg(long)]
    prepare_only: bool,
    /// Seconds between the scheduler's ticks (triggers, scheduled posts), each at the
    /// start of its period: 60 is each minute's start, as on AWS.
    #[arg(long, default_value_t = 60)]
    scheduler_tick_seconds: u64,
}

#[tokio::main]
async fn main() {
    // Colours only on a terminal, and not when NO_COLOR asks for none: a log sent to a
    // file stays plain text.
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|value| !value.is_empty());
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout()) && !no_color;
    tracing_subscriber::fmt().with_env_filter(env_filter()).with_ansi(ansi).init();
    // A refusal to start (a bad state file, an unreachable table) is one clear line.
    if let Err(error) = run(Args::parse()).await {
        eprintln!("serve: {error:#}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let emulated = ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB"]
        .iter()
        .any(|name| std::env::var(name).is_ok_and(|value| !value.is_empty()));
    if args.prepare_only && matches!(args.backend, BackendArg::Aws) && !emulated {
        anyhow::bail!(
            "--prepare-only prepares emulators (AWS_ENDPOINT_URL or AWS_ENDPOINT_URL_DYNAMODB): a stack's table, \
             bucket and queues come from its template, and a seed's keys do not belong in an AWS account"
        );
    }
    std::fs::create_dir_all(&args.data_dir)?;
    let backend = match args.backend {
        BackendArg::Embedded => Backend::Embedded,
        BackendArg::Aws => Backend::Aws,
    };
    let listener = tokio::net::TcpListener::bind(args.addr).await?;
    let public_url =
        args.public_url.unwrap_or_else(|| format!("http://{}", listener.local_addr().unwrap_or(args.addr)));
    // One process per data folder: its workers own the folder's task table.
    let lock_path = args.data_dir.join(".lock");
    let lock = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path)?;
    lock.try_lock().map_err(|_| {
        anyhow::anyhow!(
            "{} is in use by another serve process; give this one another --data-dir",
            args.data_dir.display()
        )
    })?;
    let options = ServeOptions {
        data_dir: args.data_dir,
        public_url,
        in_memory: args.in_memory,
        task_budget: std::time::Duration::from_secs(args.task_timeout.max(1)),
        segment: shared::config::segment_of(args.segment_seconds),
        allow_private_urls: args.allow_private_urls,
        webhook_schedule: shared::config::webhook_schedule_from_env()?,
        create_named_queues: args.prepare_only,
    };
    let (app, development_key) = serve::build_app(backend, args.seed.as_deref(), &options).await?;
    if args.prepare_only {
        let seeded =
            args.seed.as_ref().map_or("the development organization".to_owned(), |seed| seed.display().to_string());
        println!(
            "Prepared: the state of {} and {seeded}",
            if matches!(backend, Backend::Aws) { "the AWS backend" } else { "the data folder" }
        );
        if let Some(key) = development_key {
            println!("Development organization ready. New API key: {key}");
        }
        return Ok(());
    }
    let workers = args.workers.unwrap_or_else(serve::workers::default_count);
    let _workers = serve::workers::start(&app, workers).await?;
    if let Some(key) = development_key {
        println!("Development organization ready. New API key: {key} (keys printed before keep working)");
        println!("  curl -H 'Authorization: Bearer {key}' http://{}/whoami", listener.local_addr()?);
    }
    println!("Listening on http://{}", listener.local_addr()?);
    let app = Arc::new(app);
    // Triggers due (and, missed while stopped, once) fire at each minute's start.
    let scheduler = serve::workers::scheduler(app.clone(), Duration::from_secs(args.scheduler_tick_seconds.max(1)));
    let served = serve::run(app, listener, async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("stopping");
    })
    .await;
    scheduler.abort();
    served
}

fn env_filter() -> tracing_subscriber::EnvFilter {
    tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
}
