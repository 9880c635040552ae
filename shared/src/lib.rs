//! Video editing workflow service: the library every Lambda binary and `serve` share.
//!
//! Layers point down only: [`runtime`] and [`serve`] (entry points) → [`api`] (HTTP in
//! and out) → [`app`] (wiring, from [`config`]) → [`adapters`] (SQLite, DynamoDB, SQS,
//! S3, a local folder, ffmpeg, yt-dlp, HTTP) → [`domain`] (the rules, each context with
//! the ports it declares and the adapters implement) → [`core`] (mechanisms with no
//! domain words). Only `adapters` imports an AWS SDK or SQLite; `docs/ARCHITECTURE.md`
//! has the map.

pub mod adapters;
pub mod api;
pub mod app;
pub mod config;
pub mod core;
pub mod domain;
pub mod runtime;
pub mod serve;
