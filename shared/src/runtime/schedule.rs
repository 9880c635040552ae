//! The scheduled function `sweeper`: an EventBridge schedule invokes it every minute, and
//! each invocation runs one sweep (see `domain::runs::sweep`), answering what it did.

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
