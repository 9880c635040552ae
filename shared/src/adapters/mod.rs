//! Implementations of the ports: in-process memory, DynamoDB, S3, a local folder, ffprobe.

pub mod dynamodb;
pub mod ffprobe;
pub mod fs;
pub mod memory;
pub mod s3;
