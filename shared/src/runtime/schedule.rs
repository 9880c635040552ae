//! The scheduled functions, each invoked every minute by an EventBridge schedule and
//! answering what it did: `sweeper` runs one sweep (see `domain::runs::sweep`);
//! `scheduler` one tick (due triggers fire, due posts go to publishing).

use crate::app::App;

/// The function's name, and its binary's.
pub const SWEEPER: &str = "sweeper";
/// The DynamoDB actions `sweeper` performs, and its policy grants: Query of the sweep
/// index, GetItem of runs and deliveries, PutItem of the runs it repairs.
pub const SWEEPER_DYNAMODB_ACTIONS: &[&str] = &["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"];
/// The SQS actions `sweeper` performs (messages sent again), and its policy grants.
pub const SWEEPER_SQS_ACTIONS: &[&str] = &["sqs:SendMessage"];
/// The queues `sweeper` sends to.
pub const SWEEPER_QUEUES: &[&str] = &["TaskQueue", "WebhookQueue"];

/// Runs the `sweeper` function until the runtime stops it.
pub fn run_sweeper() -> ! {
    let setup = async {
        let app = App::from_env().await?;
        anyhow::ensure!(app.engine().missing.is_none(), "sweeper needs TASK_QUEUE_URL and MEDIA_LINK_SECRET");
        Ok(std::sync::Arc::new(app))
    };
    super::run_function(SWEEPER, setup, |app| {
        lambda_http::lambda_runtime::run(lambda_http::service_fn(
            move |_: lambda_http::LambdaEvent<serde_json::Value>| {
                let app = app.clone();
                async move {
                    let report = app.engine().sweeper.sweep().await.map_err(|error| format!("{error:#}"))?;
                    Ok::<_, String>(serde_json::json!(report))
                }
            },
        ))
    })
}

/// The scheduler function's name, and its binary's.
pub const SCHEDULER: &str = "scheduler";
/// The DynamoDB actions `scheduler` performs, and its policy grants: Query of the sweep
/// index's due items (and of runs' and asset connections' partitions as a start reads
/// them), GetItem of triggers, agents, uploads, runs and posts, PutItem of triggers'
/// states, of the runs they start (with their claims) and of the posts it claims,
/// DeleteItem of deleted triggers' states and of a claimed post's status copies.
pub const SCHEDULER_DYNAMODB_ACTIONS: &[&str] =
    &["dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"];
/// The SQS actions `scheduler` performs (the started runs' first tasks and events).
pub const SCHEDULER_SQS_ACTIONS: &[&str] = &["sqs:SendMessage"];
/// The queues `scheduler` sends to.
pub const SCHEDULER_QUEUES: &[&str] = &["TaskQueue", "WebhookQueue"];

/// One tick of the scheduler at `now`, in phases: the due triggers fire
/// (`domain::triggers`: Schedules, then feeds, each organization within its share), then
/// the scheduled posts due go to publishing (`domain::social`) at a fresh clock: `now`
/// moved on by the triggers' time, so a post due while they fired goes now, not a
/// minute later. Both are done whatever the other did; the tick fails (and is logged)
/// when either did.
pub async fn scheduler_tick(app: &App, now: crate::domain::time::Timestamp) -> anyhow::Result<serde_json::Value> {
    scheduler_tick_within(app, now, crate::domain::triggers::TickLimits::default()).await
}

/// [`scheduler_tick`] with the triggers' phases within `limits` (tests pass small ones).
pub async fn scheduler_tick_within(
    app: &App,
    now: crate::domain::time::Timestamp,
    limits: crate::domain::triggers::TickLimits,
) -> anyhow::Result<serde_json::Value> {
    if let Some(missing) = app.runs_missing() {
        anyhow::bail!("the scheduler starts runs: {missing}");
    }
    let started = std::time::Instant::now();
    let queues = app.queues();
    let notifier = queues.notifier(app.links.clone());
    let runs = crate::api::runs::ports(app, queues, &notifier);
    let triggers = crate::api::triggers::firing(app, &runs).tick_within(now, limits).await;
    // The clock read again, as a moved tick's time (a tick given its time in a test
    // keeps to it): the function's `now` is the clock at its start.
    let posts_now = now.after(started.elapsed());
    let posts = app.social().publish_due(posts_now).await;
    match (triggers, posts) {
        (Ok(triggers), Ok(posts)) => Ok(serde_json::json!({ "triggers": triggers, "posts": posts })),
        (Err(error), _) => Err(error.context("firing the due triggers")),
        (_, Err(error)) => Err(error.context("publishing the due posts")),
    }
}

/// Runs the `scheduler` function until the runtime stops it.
pub fn run_scheduler() -> ! {
    let setup = async {
        let app = App::from_env().await?;
        if let Some(missing) = app.runs_missing() {
            anyhow::bail!("scheduler starts runs: {missing}");
        }
        Ok(std::sync::Arc::new(app))
    };
    super::run_function(SCHEDULER, setup, |app| {
        lambda_http::lambda_runtime::run(lambda_http::service_fn(
            move |_: lambda_http::LambdaEvent<serde_json::Value>| {
                let app = app.clone();
                async move {
                    let now = app.clock.now();
                    scheduler_tick(&app, now).await.map_err(|error| format!("{error:#}"))
                }
            },
        ))
    })
}
