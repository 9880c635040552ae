//! Entry points of the Lambda functions: HTTP (one function per route) and the node-task
//! queue (`node-worker`); the webhook queue gets its own here too, and the scheduled
//! `sweeper`.

pub mod http;
pub mod schedule;
pub mod sqs;
