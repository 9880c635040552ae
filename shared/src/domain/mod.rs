//! The service's rules: validation, limits and identity, free of HTTP and AWS types.

pub mod identity;
pub mod shared_stores;
pub mod time;
