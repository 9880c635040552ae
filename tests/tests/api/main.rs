//! HTTP-level tests of the API: one binary, each test with its own organization.

mod helpers;

mod agents;
mod assets;
mod auth;
mod avatars;
mod bulk_faults;
mod concurrency;
mod crashes;
mod credits;
mod failures;
mod faults;
mod fuzz_findings;
mod generation;
mod hardening;
mod iam;
mod idempotency;
mod lambda;
mod lambda_binaries;
mod lambda_events;
mod layers;
mod logs;
mod node_types;
mod openapi;
mod outputs;
mod providers;
mod runs;
mod runtime_emulator;
mod serve;
mod shared_stores;
mod sites;
mod social;
mod stripe;
mod template;
mod uploads;
mod webhooks;
