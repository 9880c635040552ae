//! Video editing workflow service: the library every Lambda binary and `serve` share.
//!
//! Layers point down only: [`runtime`] and [`serve`] (entry points) → [`api`] (HTTP in
//! and out) → [`domain`] (rules) → [`ports`] (traits) ← [`adapters`] (SQLite, DynamoDB,
//! S3, a local folder, ffprobe); [`core`] holds mechanisms with no domain words that
//! every layer may use. Only `adapters` imports an AWS SDK or SQLite.

pub mod adapters;
pub mod api;
pub mod app;
pub mod config;
pub mod core;
pub mod domain;
pub mod runtime;
pub mod serve;
