//! The chunk name service (issue 18; `docs/chunks.md`, "Names"): names for
//! chunk ids, kept in an ordinary key-value table (by convention
//! [`NAMES_TABLE`]), so they are replicated, recovered and restarted with
//! everything else and need nothing of the coordinator, which stays off the
//! data path.
//!
//! A name of chunk table `table` is the object whose key is `table` as 8
//! little-endian bytes followed by the name, and whose value is the chunk
//! id as 8 little-endian bytes. Listing by prefix enumerates the names
//! table (names are few: this is a directory, not an index).

use crate::blocking::Client;
use crate::error::{ReadError, TableError, WriteError};
use shoal_proto::{ChunkId, ErrorStatus, Version};
use shoal_proto::{RejectRules, TableId};

/// The key-value table the CLI keeps chunk names in.
pub const NAMES_TABLE: &str = "chunk-names";

fn key(table: TableId, name: &[u8]) -> Vec<u8> {
    let mut k = table.0.to_le_bytes().to_vec();
    k.extend_from_slice(name);
    k
}

/// Registers `name` for chunk `id` of chunk table `table` in the names
/// table `names`; with `replace` false an existing name is refused
/// (`WriteError::Rejected`). Returns the name's version.
pub fn register(
    c: &mut Client,
    names: TableId,
    table: TableId,
    name: &[u8],
    id: ChunkId,
    replace: bool,
) -> Result<Version, WriteError> {
    let rules = if replace { RejectRules::default() } else { RejectRules::must_not_exist() };
    c.write_with(names, &key(table, name), &id.0.to_le_bytes(), rules)
}

/// The chunk id registered for `name`; `ReadError::NotFound` if none.
pub fn lookup(c: &mut Client, names: TableId, table: TableId, name: &[u8]) -> Result<ChunkId, ReadError> {
    let (value, _) = c.read(names, &key(table, name))?;
    let bytes: [u8; 8] = value.as_slice().try_into().map_err(|_| {
        ReadError::Client(crate::ClientError::Protocol(format!("a chunk name holds {} bytes, not 8", value.len())))
    })?;
    Ok(ChunkId(u64::from_le_bytes(bytes)))
}

/// Removes `name`; the version it had, `None` if there was none.
pub fn unregister(c: &mut Client, names: TableId, table: TableId, name: &[u8]) -> Result<Option<Version>, WriteError> {
    c.remove(names, &key(table, name))
}

/// Every name of `table` starting with `prefix`, sorted, with its chunk id.
pub fn list(
    c: &mut Client,
    names: TableId,
    table: TableId,
    prefix: &[u8],
) -> Result<Vec<(Vec<u8>, ChunkId)>, TableError> {
    let want = key(table, prefix);
    let mut out: Vec<(Vec<u8>, ChunkId)> = c
        .enumerate_all(names)?
        .into_iter()
        .filter(|o| o.key.starts_with(&want))
        .filter_map(|o| {
            let id: [u8; 8] = o.value.as_slice().try_into().ok()?;
            Some((o.key[8..].to_vec(), ChunkId(u64::from_le_bytes(id))))
        })
        .collect();
    out.sort();
    Ok(out)
}

/// Whether a refusal is the "name exists" of [`register`] without replace.
pub fn is_taken(e: &WriteError) -> bool {
    matches!(e, WriteError::Rejected(crate::Rejected::Exists { .. }))
        || matches!(e, WriteError::Client(crate::ClientError::Refused(ErrorStatus::ObjectExists { .. })))
}
