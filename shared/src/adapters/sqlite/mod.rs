//! The embedded backend: SQLite (compiled in) in one file of the data folder, in WAL mode
//! so that readers never wait for the writer.
//!
//! Every call runs on tokio's blocking pool with a connection from a small pool, so no
//! SQLite call blocks an async worker. Writes are `BEGIN IMMEDIATE` transactions: SQLite
//! lets one writer in at a time, and each write reads, checks its limit and writes inside
//! its transaction, so limits hold under concurrent writers exactly as the conditional
//! writes of DynamoDB make them hold there. A writer waits for the lock up to the
//! `SQLITE_BUSY` budget, then the request is unavailable.
//!
//! Commits are durable (`synchronous = FULL`): an answered write survives the process
//! being killed, and the machine losing power.

mod agents;
mod assets;
mod avatars;
mod credits;
// The account's property test: the domain's run and credit rules on this repository.
#[cfg(test)]
mod credit_properties;
mod idempotency;
mod identity;
mod runs;
mod schema;
mod shared_stores;
mod social;
pub mod tasks;
mod triggers;
mod uploads;
pub mod webhooks;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use rusqlite::{Connection, ErrorCode, OpenFlags};
use tokio::sync::Semaphore;

use crate::core::retry::{Unavailable, SQLITE_BUSY};

/// Connections working at once on a database file (readers run in parallel; writers
/// take turns on SQLite's lock).
const FILE_CONNECTIONS: usize = 8;

/// The SQLite backend; cheap to clone.
#[derive(Clone)]
pub struct Sqlite {
    inner: Arc<Pool>,
}

struct Pool {
    target: Target,
    idle: Mutex<Vec<Connection>>,
    permits: Arc<Semaphore>,
    /// In memory, the database lives as long as one connection to it: this one, which
    /// never runs anything, keeps it alive whatever happens to the working connection.
    _anchor: Option<Mutex<Connection>>,
    /// Runs as this process last read or wrote them.
    runs: crate::domain::runs::stored::RunCache,
}

enum Target {
    File(PathBuf),
    /// A shared-cache in-memory database, by URI.
    Memory(String),
}

/// Milliseconds since the Unix epoch by `clock`: the unit of the queue tables' times.
pub(super) fn now_millis(clock: &dyn crate::domain::time::Clock) -> i64 {
    clock.now().unix_millis() as i64
}

/// Every repository of the service, in this database.
impl crate::domain::Backend for Sqlite {}

impl Sqlite {
    /// Opens (creating when missing) the database at `path` and brings its schema up to
    /// date. A file that is not SQLite, is corrupt, belongs to another program or was
    /// written by a newer version is refused with a message naming it.
    pub fn open(path: impl Into<PathBuf>) -> anyhow::Result<Self> {
        let path = path.into();
        let refused =
            |problem: String| anyhow::anyhow!("{} cannot be used as this service's state: {problem}", path.display());
        let target = Target::File(path.clone());
        let mut connection = open_connection(&target).map_err(|error| refused(format!("{error:#}")))?;
        // Wait out another process that is creating or migrating the same file.
        connection.busy_timeout(SQLITE_BUSY.budget).map_err(|error| refused(format!("{error}")))?;
        // Checked before anything is written to it.
        schema::check_integrity(&connection).map_err(|problem| refused(format!("{problem:#}")))?;
        configure(&connection).map_err(|error| refused(format!("{error:#}")))?;
        connection
            .pragma_update(None, "journal_mode", "WAL")
            .map_err(|error| refused(format!("cannot switch to WAL mode: {error}")))?;
        schema::migrate(&mut connection).map_err(|problem| refused(format!("{problem:#}")))?;
        Ok(Self::with_pool(Target::File(path), vec![connection], FILE_CONNECTIONS, None))
    }

    /// The database's file; None in memory.
    pub fn file(&self) -> Option<&std::path::Path> {
        match &self.inner.target {
            Target::File(path) => Some(path),
            Target::Memory(_) => None,
        }
    }

    /// A new, empty database in process memory, lost when the last clone is dropped.
    pub fn in_memory() -> anyhow::Result<Self> {
        let uri = format!("file:video-workflow-{}?mode=memory&cache=shared", uuid::Uuid::new_v4().simple());
        let target = Target::Memory(uri);
        let anchor = connect(&target)?;
        let mut connection = connect(&target)?;
        schema::migrate(&mut connection)?;
        // One working connection: in shared-cache memory, writers would otherwise fail
        // on table locks instead of waiting.
        Ok(Self::with_pool(target, vec![connection], 1, Some(anchor)))
    }

    fn with_pool(target: Target, idle: Vec<Connection>, size: usize, anchor: Option<Connection>) -> Self {
        Self {
            inner: Arc::new(Pool {
                target,
                idle: Mutex::new(idle),
                permits: Arc::new(Semaphore::new(size)),
                _anchor: anchor.map(Mutex::new),
                runs: Default::default(),
            }),
        }
    }

    /// Runs `work` with a connection on the blocking pool.
    async fn call<T, E>(&self, work: impl FnOnce(&mut Connection) -> Result<T, E> + Send + 'static) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<anyhow::Error> + Send + 'static,
    {
        let permit = self.inner.permits.clone().acquire_owned().await.map_err(anyhow::Error::from)?;
        let pool = self.inner.clone();
        let joined = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let mut connection = pool.checkout()?;
            let result = work(&mut connection);
            pool.checkin(connection);
            result
        })
        .await;
        joined.unwrap_or_else(|error| Err(anyhow::anyhow!("a database call did not finish: {error}").into()))
    }

    /// Runs `work` in a write transaction (`BEGIN IMMEDIATE`: SQLite's write lock is
    /// taken first, so the reads inside see what the writes will build on), committed
    /// when it returns Ok and rolled back otherwise.
    async fn write<T, E>(&self, work: impl FnOnce(&Connection) -> Result<T, E> + Send + 'static) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<anyhow::Error> + Send + 'static,
    {
        self.call(move |connection| in_transaction(connection, "BEGIN IMMEDIATE", work)).await
    }

    /// Runs `work` in a read transaction: one consistent snapshot for all its reads.
    async fn read<T, E>(&self, work: impl FnOnce(&Connection) -> Result<T, E> + Send + 'static) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<anyhow::Error> + Send + 'static,
    {
        self.call(move |connection| in_transaction(connection, "BEGIN DEFERRED", work)).await
    }
}

/// Runs `work` between `begin` and COMMIT, or ROLLBACK when it fails. The three are
/// prepared once per connection (preparing them anew on each call costs as much as a
/// read). A connection left inside a transaction (a panic) is not put back in the pool.
fn in_transaction<T, E>(
    connection: &mut Connection,
    begin: &'static str,
    work: impl FnOnce(&Connection) -> Result<T, E>,
) -> Result<T, E>
where
    E: From<anyhow::Error>,
{
    let run = |connection: &Connection, sql: &'static str| -> anyhow::Result<()> {
        connection.prepare_cached(sql).and_then(|mut statement| statement.execute([])).map(drop).db(sql)
    };
    run(connection, begin)?;
    let outcome = work(connection).and_then(|value| Ok(run(connection, "COMMIT").map(|()| value)?));
    if outcome.is_err() && !connection.is_autocommit() {
        if let Err(error) = run(connection, "ROLLBACK") {
            tracing::warn!(error = %format!("{error:#}"), "rolling back a failed transaction failed");
        }
    }
    outcome
}

impl Pool {
    fn checkout(&self) -> anyhow::Result<Connection> {
        let idle = self.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).pop();
        match idle {
            Some(connection) => Ok(connection),
            None => connect(&self.target),
        }
    }

    fn checkin(&self, connection: Connection) {
        if connection.is_autocommit() {
            self.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(connection);
        }
    }
}

/// Opens a connection with the settings every connection uses.
fn connect(target: &Target) -> anyhow::Result<Connection> {
    let connection = open_connection(target)?;
    configure(&connection)?;
    Ok(connection)
}

fn open_connection(target: &Target) -> anyhow::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    match target {
        Target::File(path) => Connection::open_with_flags(path, flags),
        Target::Memory(uri) => Connection::open_with_flags(uri, flags | OpenFlags::SQLITE_OPEN_URI),
    }
    .context("opening the database")
}

fn configure(connection: &Connection) -> anyhow::Result<()> {
    connection.busy_timeout(SQLITE_BUSY.budget).context("setting the lock wait")?;
    connection.pragma_update(None, "synchronous", "FULL").context("setting durable commits")?;
    connection.pragma_update(None, "foreign_keys", "ON").context("enabling foreign keys")?;
    Ok(())
}

/// Context for SQLite results: a lock that stayed taken past the `SQLITE_BUSY` budget is
/// [`Unavailable`]; anything else is an error in the context `what`.
trait Db<T> {
    fn db(self, what: &'static str) -> anyhow::Result<T>;
}

impl<T> Db<T> for Result<T, rusqlite::Error> {
    fn db(self, what: &'static str) -> anyhow::Result<T> {
        self.map_err(|error| match error.sqlite_error_code() {
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => anyhow::Error::new(Unavailable(format!(
                "{what}: the SQLite database stayed locked by other writers for {} s",
                SQLITE_BUSY.budget.as_secs()
            ))),
            _ => anyhow::Error::new(error).context(what),
        })
    }
}

/// Reads a column that holds text in one of the domain's forms (IDs, timestamps).
/// One receive of a local queue: `look`s, and when nothing is there waits for `wake` (at
/// most `idle`) and looks once more. Listening starts before the first look, so a send
/// between the look and the wait is not missed.
async fn look_or_wait<T, F, Fut>(
    wake: &tokio::sync::Notify,
    idle: std::time::Duration,
    look: F,
) -> anyhow::Result<Vec<T>>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let notified = wake.notified();
    tokio::pin!(notified);
    notified.as_mut().enable();
    if let Some(found) = look().await? {
        return Ok(vec![found]);
    }
    let _ = tokio::time::timeout(idle, notified).await;
    Ok(look().await?.into_iter().collect())
}

/// The JSON `document` of the row `id` of `organization` in `table`, if there is one.
fn document_of<T: serde::de::DeserializeOwned>(
    connection: &Connection,
    table: &'static str,
    (organization, id): (&str, &str),
    what: &'static str,
) -> anyhow::Result<Option<T>> {
    use rusqlite::OptionalExtension;
    let document: Option<String> = connection
        .prepare_cached(&format!("SELECT document FROM {table} WHERE organization_id = ?1 AND id = ?2"))
        .db(what)?
        .query_row([organization, id], |row| row.get(0))
        .optional()
        .db(what)?;
    document
        .as_deref()
        .map(|text| serde_json::from_str(text).with_context(|| format!("{what}: stored document")))
        .transpose()
}

fn parsed<T: std::str::FromStr>(row: &rusqlite::Row<'_>, index: usize) -> rusqlite::Result<T>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    let text: String = row.get(index)?;
    text.parse()
        .map_err(|error| rusqlite::Error::FromSqlConversionFailure(index, rusqlite::types::Type::Text, Box::new(error)))
}

/// As [`parsed`], for a column that may be NULL.
fn parsed_optional<T: std::str::FromStr>(row: &rusqlite::Row<'_>, index: usize) -> rusqlite::Result<Option<T>>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    match row.get::<_, Option<String>>(index)? {
        None => Ok(None),
        Some(text) => text.parse().map(Some).map_err(|error| {
            rusqlite::Error::FromSqlConversionFailure(index, rusqlite::types::Type::Text, Box::new(error))
        }),
    }
}
