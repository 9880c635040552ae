//! Entry points of the Lambda functions: today HTTP (one function per route); the node
//! and webhook queues get theirs here too.

pub mod http;
