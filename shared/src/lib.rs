//! Video editing workflow service: the library every Lambda binary and `serve` share.
//!
//! Layers point down only: [`api`] (HTTP in/out) → [`domain`] (rules) → [`ports`]
//! (traits) ← [`adapters`] (DynamoDB, in-memory). Only `adapters` imports an AWS SDK.

pub mod adapters;
pub mod api;
pub mod app;
pub mod config;
pub mod domain;
pub mod lambda;
pub mod ports;
pub mod serve;
