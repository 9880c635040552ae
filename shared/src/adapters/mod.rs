//! Implementations of the ports: in-process memory and DynamoDB.

pub mod dynamodb;
pub mod memory;
