//! The schema as versioned migrations, applied in order at start: `user_version` counts
//! the migrations applied, and `application_id` marks the file as this service's, so a
//! database of another program is refused rather than changed.

use anyhow::Context;
use rusqlite::{Connection, TransactionBehavior};

/// `application_id` of this service's databases ("VWF1").
pub const APPLICATION_ID: i64 = 0x5657_4631;

/// Every migration, oldest first; a migration, once released, never changes.
pub const MIGRATIONS: &[&str] = &[
    // 1: organizations, keys, workspaces, shared stores, agents, uploads.
    "CREATE TABLE organizations (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        slug TEXT NOT NULL,
        api_access INTEGER NOT NULL,
        plan TEXT NOT NULL,
        credits INTEGER NOT NULL,
        created_at TEXT NOT NULL
    ) STRICT;
    CREATE TABLE api_keys (
        key_hash TEXT PRIMARY KEY,
        organization_id TEXT,
        created_at TEXT NOT NULL,
        last_used_at TEXT
    ) STRICT;
    CREATE TABLE workspaces (
        organization_id TEXT NOT NULL,
        id TEXT NOT NULL,
        name TEXT NOT NULL,
        is_primary INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (organization_id, id)
    ) STRICT;
    CREATE TABLE shared_stores (
        organization_id TEXT NOT NULL,
        id TEXT NOT NULL,
        name TEXT NOT NULL,
        source_type TEXT NOT NULL,
        entry_count INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (organization_id, id)
    ) STRICT;
    CREATE TABLE store_entries (
        organization_id TEXT NOT NULL,
        store_id TEXT NOT NULL,
        entry_id TEXT NOT NULL,
        display_name TEXT NOT NULL,
        metadata TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (organization_id, store_id, entry_id),
        FOREIGN KEY (organization_id, store_id) REFERENCES shared_stores (organization_id, id) ON DELETE CASCADE
    ) STRICT;
    CREATE TABLE agents (
        organization_id TEXT NOT NULL,
        id TEXT NOT NULL,
        name TEXT NOT NULL,
        name_lower TEXT NOT NULL,
        description TEXT NOT NULL,
        visibility TEXT NOT NULL,
        workspace_id TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        version INTEGER NOT NULL,
        graph TEXT NOT NULL,
        deleted_at TEXT,
        PRIMARY KEY (organization_id, id)
    ) STRICT;
    CREATE TABLE uploads (
        organization_id TEXT NOT NULL,
        id TEXT NOT NULL,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at TEXT NOT NULL,
        upload_expires_at TEXT NOT NULL,
        finalized_at TEXT,
        size_bytes INTEGER,
        duration_ms INTEGER,
        width INTEGER,
        height INTEGER,
        codec TEXT,
        format TEXT,
        blob_key TEXT,
        blob_version TEXT,
        PRIMARY KEY (organization_id, id)
    ) STRICT;",
    // 2: runs (one document each, with the columns lists filter on), media records, and
    // the durable queue of task messages.
    "CREATE TABLE runs (
        organization_id TEXT NOT NULL,
        id TEXT NOT NULL,
        agent_id TEXT NOT NULL,
        status TEXT NOT NULL,
        started_at TEXT NOT NULL,
        version INTEGER NOT NULL,
        document TEXT NOT NULL,
        PRIMARY KEY (organization_id, id)
    ) STRICT;
    CREATE INDEX runs_by_start ON runs (organization_id, started_at DESC, id DESC);
    CREATE INDEX runs_by_agent ON runs (organization_id, agent_id, started_at DESC, id DESC);
    CREATE INDEX runs_running ON runs (status) WHERE status = 'running';
    CREATE TABLE media (
        id TEXT PRIMARY KEY,
        organization_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        key TEXT NOT NULL,
        content_type TEXT NOT NULL,
        duration_ms INTEGER,
        created_at TEXT NOT NULL
    ) STRICT;
    CREATE TABLE task_queue (
        id INTEGER PRIMARY KEY,
        message TEXT NOT NULL UNIQUE,
        visible_at INTEGER NOT NULL,
        receives INTEGER NOT NULL DEFAULT 0
    ) STRICT;
    CREATE INDEX task_queue_visible ON task_queue (visible_at, id);",
    // 3: the object version a media record reads (an upload's sealed version on S3).
    "ALTER TABLE media ADD COLUMN version TEXT;",
    // 4: webhook deliveries (the delivery log, and the local webhook queue: a pending
    // row whose next attempt is due and that no sender claims is a message to send) and
    // organizations' webhook secrets.
    "CREATE TABLE webhook_deliveries (
        organization_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        sequence INTEGER NOT NULL,
        id TEXT NOT NULL UNIQUE,
        state TEXT NOT NULL,
        next_attempt_ms INTEGER,
        attempted INTEGER NOT NULL,
        claim_token TEXT,
        claimed_until_ms INTEGER,
        document TEXT NOT NULL,
        PRIMARY KEY (organization_id, run_id, sequence)
    ) STRICT;
    CREATE INDEX webhook_deliveries_due ON webhook_deliveries (state, next_attempt_ms);
    CREATE TABLE webhook_secrets (
        organization_id TEXT PRIMARY KEY,
        secret TEXT NOT NULL,
        created_at TEXT NOT NULL
    ) STRICT;",
    // 5: organizations' idempotency keys: a claim (token, lease) or a kept answer
    // (status, body), until `expires_ms`.
    "CREATE TABLE idempotency_keys (
        organization_id TEXT NOT NULL,
        key TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        token TEXT,
        lease_until_ms INTEGER,
        status INTEGER,
        body TEXT,
        expires_ms INTEGER NOT NULL,
        PRIMARY KEY (organization_id, key)
    ) STRICT;
    CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_ms);",
    // 6: workspaces' asset-manager connections (one per workspace) and the `local`
    // provider's items.
    "CREATE TABLE asset_connections (
        organization_id TEXT NOT NULL,
        workspace_id TEXT NOT NULL,
        document TEXT NOT NULL,
        PRIMARY KEY (organization_id, workspace_id)
    ) STRICT;
    CREATE TABLE asset_items (
        organization_id TEXT NOT NULL,
        connection_id TEXT NOT NULL,
        id TEXT NOT NULL,
        document TEXT NOT NULL,
        PRIMARY KEY (organization_id, connection_id, id)
    ) STRICT;",
    // 7: a run as records (domain::runs::stored): `runs.document` is its head once
    // `plan` is set (a row without a plan is a whole run, as stored before), its tasks'
    // state in chunks, its outputs one row each.
    "ALTER TABLE runs ADD COLUMN plan TEXT;
    CREATE TABLE run_chunks (
        organization_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        chunk INTEGER NOT NULL,
        document TEXT NOT NULL,
        PRIMARY KEY (organization_id, run_id, chunk)
    ) STRICT;
    CREATE TABLE run_outputs (
        organization_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        position INTEGER NOT NULL,
        document TEXT NOT NULL,
        PRIMARY KEY (organization_id, run_id, position)
    ) STRICT;",
    // 8: avatar profiles; a name is unique in its workspace, compared trimmed and case
    // folded (name_key).
    "CREATE TABLE avatar_profiles (
        organization_id TEXT NOT NULL,
        id TEXT NOT NULL,
        workspace_id TEXT NOT NULL,
        name_key TEXT NOT NULL,
        version INTEGER NOT NULL,
        document TEXT NOT NULL,
        PRIMARY KEY (organization_id, id)
    ) STRICT;
    CREATE UNIQUE INDEX avatar_names ON avatar_profiles (organization_id, workspace_id, name_key);
    CREATE INDEX avatars_by_workspace ON avatar_profiles (organization_id, workspace_id, id);",
    // 9: credit accounts (a document under a write count), their ledgers (ordered by
    // the write and the entry's place in it), the payments applied once, and checkouts.
    "CREATE TABLE credit_accounts (
        organization_id TEXT PRIMARY KEY,
        seq INTEGER NOT NULL,
        document TEXT NOT NULL
    ) STRICT;
    CREATE TABLE credit_ledger (
        organization_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        position INTEGER NOT NULL,
        document TEXT NOT NULL,
        PRIMARY KEY (organization_id, seq, position)
    ) STRICT;
    CREATE TABLE billing_once (
        key TEXT PRIMARY KEY,
        organization_id TEXT NOT NULL
    ) STRICT;
    CREATE TABLE checkouts (
        id TEXT PRIMARY KEY,
        organization_id TEXT NOT NULL,
        document TEXT NOT NULL
    ) STRICT;",
    // 10: triggers (a document under a write count; `due_at` is the next fire or poll,
    // NULL when none, indexed for the scheduler), the claims that let a due time or a
    // feed entry start one run only, and the trigger a run was started by.
    "CREATE TABLE triggers (
        organization_id TEXT NOT NULL,
        id TEXT NOT NULL,
        version INTEGER NOT NULL,
        due_at TEXT,
        document TEXT NOT NULL,
        PRIMARY KEY (organization_id, id)
    ) STRICT;
    CREATE INDEX triggers_due ON triggers (due_at) WHERE due_at IS NOT NULL;
    CREATE TABLE run_claims (
        organization_id TEXT NOT NULL,
        claim TEXT NOT NULL,
        run_id TEXT NOT NULL,
        PRIMARY KEY (organization_id, claim)
    ) STRICT;
    ALTER TABLE runs ADD COLUMN trigger_id TEXT;
    CREATE INDEX runs_by_trigger ON runs (organization_id, trigger_id, started_at) WHERE trigger_id IS NOT NULL;",
    // 11: social connections and posts: a post's row carries the columns its list
    // filters on (status), its due time while it is scheduled (the scheduler's index),
    // and one row per destination (connection and platform filters).
    "CREATE TABLE social_connections (
        organization_id TEXT NOT NULL,
        id TEXT NOT NULL,
        document TEXT NOT NULL,
        PRIMARY KEY (organization_id, id)
    ) STRICT;
    CREATE TABLE social_posts (
        organization_id TEXT NOT NULL,
        id TEXT NOT NULL,
        status TEXT NOT NULL,
        due_ms INTEGER,
        version INTEGER NOT NULL,
        document TEXT NOT NULL,
        PRIMARY KEY (organization_id, id)
    ) STRICT;
    CREATE INDEX social_posts_by_status ON social_posts (organization_id, status, id);
    CREATE INDEX social_posts_due ON social_posts (due_ms) WHERE due_ms IS NOT NULL;
    CREATE TABLE social_post_destinations (
        organization_id TEXT NOT NULL,
        post_id TEXT NOT NULL,
        connection_id TEXT NOT NULL,
        platform TEXT NOT NULL,
        PRIMARY KEY (organization_id, post_id, connection_id)
    ) STRICT;
    CREATE INDEX social_posts_by_connection ON social_post_destinations (organization_id, connection_id, post_id);
    CREATE INDEX social_posts_by_platform ON social_post_destinations (organization_id, platform, post_id);",
    // 12: refunds a cancel or a sweep owes, paid in batches: a run owing some is swept
    // like a running one until they are paid.
    "ALTER TABLE runs ADD COLUMN refunds_owed INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX runs_to_sweep ON runs (organization_id, id) WHERE status = 'running' OR refunds_owed > 0;",
    // 13: a trigger's kind (`schedule` or `feed`, `TriggerKind::name`), each kind's due
    // triggers in an index of their own so that the scheduler reads each with its own
    // bound; the rows written before get theirs from their node type (the Channel Feed's
    // ID, checked by a test).
    "ALTER TABLE triggers ADD COLUMN kind TEXT NOT NULL DEFAULT 'schedule';
    UPDATE triggers SET kind = 'feed'
        WHERE json_extract(document, '$.node_type_id') = '795c3a4b-fb36-4ffc-943a-6c7bf4f3d99e';
    DROP INDEX triggers_due;
    CREATE INDEX triggers_due ON triggers (kind, due_at, organization_id, id) WHERE due_at IS NOT NULL;",
];

/// Refuses a file that is not a readable SQLite database or fails SQLite's own check.
pub fn check_integrity(connection: &Connection) -> anyhow::Result<()> {
    let verdict: String = connection.query_row("PRAGMA quick_check", [], |row| row.get(0)).map_err(|error| {
        match error.sqlite_error_code() {
            // A damaged schema page fails before the check can run.
            Some(rusqlite::ErrorCode::DatabaseCorrupt) => anyhow::anyhow!("SQLite finds it corrupt: {error}"),
            _ => anyhow::anyhow!("it is not a SQLite database, or SQLite cannot read it ({error})"),
        }
    })?;
    if verdict != "ok" {
        let lines: Vec<&str> = verdict.lines().filter(|line| !line.starts_with("***")).collect();
        let more = if lines.len() > 3 { format!(" (and {} more problems)", lines.len() - 3) } else { String::new() };
        anyhow::bail!(
            "SQLite finds it corrupt: {}{more}",
            lines.iter().take(3).copied().collect::<Vec<_>>().join("; ")
        );
    }
    Ok(())
}

/// Applies the migrations not applied yet, each in its own write transaction (two
/// processes starting at once apply each migration once).
pub fn migrate(connection: &mut Connection) -> anyhow::Result<()> {
    loop {
        let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let application_id: i64 = transaction.query_row("PRAGMA application_id", [], |row| row.get(0))?;
        let version: i64 = transaction.query_row("PRAGMA user_version", [], |row| row.get(0))?;
        let tables: i64 = transaction.query_row("SELECT count(*) FROM sqlite_schema", [], |row| row.get(0))?;
        match application_id {
            APPLICATION_ID => {}
            0 if tables == 0 => transaction.pragma_update(None, "application_id", APPLICATION_ID)?,
            other => anyhow::bail!(
                "it belongs to another program (its SQLite application_id is {other:#x}, this service's is \
                 {APPLICATION_ID:#x}); give serve another --data-dir"
            ),
        }
        let known = MIGRATIONS.len() as i64;
        anyhow::ensure!(
            version <= known,
            "it was written by a newer version of this service (schema version {version}, this one knows {known})"
        );
        if version == known {
            return Ok(transaction.commit()?);
        }
        transaction
            .execute_batch(MIGRATIONS[version as usize])
            .with_context(|| format!("applying schema migration {}", version + 1))?;
        transaction.pragma_update(None, "user_version", version + 1)?;
        transaction.commit()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_apply_once_and_record_their_version() {
        let mut connection = Connection::open_in_memory().unwrap();
        migrate(&mut connection).unwrap();
        migrate(&mut connection).unwrap();
        let version: i64 = connection.query_row("PRAGMA user_version", [], |row| row.get(0)).unwrap();
        assert_eq!(version, MIGRATIONS.len() as i64);
        let id: i64 = connection.query_row("PRAGMA application_id", [], |row| row.get(0)).unwrap();
        assert_eq!(id, APPLICATION_ID);
    }

    #[test]
    fn the_trigger_kinds_migration_names_the_channel_feeds_node_type() {
        let feed = crate::domain::nodes::CHANNEL_FEED_TRIGGER.to_string();
        let migration = MIGRATIONS.iter().find(|sql| sql.contains("SET kind = 'feed'")).unwrap();
        assert!(migration.contains(&format!("'{feed}'")), "{migration}");
    }

    #[test]
    fn a_database_of_another_program_or_a_newer_version_is_refused() {
        let mut foreign = Connection::open_in_memory().unwrap();
        foreign.execute_batch("CREATE TABLE notes (body TEXT)").unwrap();
        assert!(format!("{:#}", migrate(&mut foreign).unwrap_err()).contains("another program"));
        let mut newer = Connection::open_in_memory().unwrap();
        migrate(&mut newer).unwrap();
        newer.pragma_update(None, "user_version", 99).unwrap();
        assert!(format!("{:#}", migrate(&mut newer).unwrap_err()).contains("newer version"));
    }
}
