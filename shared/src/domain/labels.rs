//! Limits on the names and labels every context stores (part of the kernel).

/// Longest stored name or label (store names, display names, `source_type`, seeded
/// names) where the contract sets no smaller limit: with entry IDs of at most 1,024 bytes
/// and metadata of at most 256,000 bytes, every stored item stays under DynamoDB's 400 KB.
pub const MAX_LABEL_CHARS: usize = 1_000;
