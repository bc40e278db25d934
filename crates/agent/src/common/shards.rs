//! Rows published in shards: a table an owner publishes after every change
//! without copying it. Rows are spread over a fixed number of shards by
//! the hash of their key; publishing makes again only the shards whose
//! rows changed and copies one pointer per shard, so a change costs about
//! the square root of the table's size rather than its size. Readers get
//! every row in no particular order and sort what they show.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::Arc;

/// How many shards a table has.
const SHARDS: usize = 32;

/// A published table: every shard's rows.
pub(crate) type Published<V> = Arc<[Arc<[Arc<V>]>]>;

/// The owner's side of a table of `V` rows keyed by `K`.
pub(crate) struct Shards<K, V> {
    hasher: RandomState,
    rows: Vec<HashMap<K, Arc<V>>>,
    published: Vec<Arc<[Arc<V>]>>,
    changed: Vec<bool>,
}

impl<K: Hash + Eq, V> Default for Shards<K, V> {
    fn default() -> Self {
        Self {
            hasher: RandomState::new(),
            rows: (0..SHARDS).map(|_| HashMap::new()).collect(),
            published: (0..SHARDS).map(|_| Arc::from(Vec::new())).collect(),
            changed: vec![false; SHARDS],
        }
    }
}

impl<K: Hash + Eq, V> Shards<K, V> {
    fn shard(&self, key: &K) -> usize {
        (self.hasher.hash_one(key) % SHARDS as u64) as usize
    }

    /// Sets `key`'s row, or removes it.
    pub(crate) fn set(&mut self, key: K, row: Option<V>) {
        let shard = self.shard(&key);
        let rows = &mut self.rows[shard];
        let changed = match row {
            Some(row) => {
                rows.insert(key, Arc::new(row));
                true
            }
            None => rows.remove(&key).is_some(),
        };
        self.changed[shard] |= changed;
    }

    /// The table as it is now, sharing every unchanged shard with the
    /// last one published.
    pub(crate) fn publish(&mut self) -> Published<V> {
        for (shard, changed) in self.changed.iter_mut().enumerate() {
            if std::mem::take(changed) {
                self.published[shard] = self.rows[shard].values().cloned().collect();
            }
        }
        self.published.iter().cloned().collect()
    }
}

/// Every row of a published table, in no particular order.
pub(crate) fn rows<V>(table: &Published<V>) -> impl Iterator<Item = &Arc<V>> {
    table.iter().flat_map(|shard| shard.iter())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_publish_shares_the_shards_no_row_of_which_changed() {
        let mut table: Shards<u32, String> = Shards::default();
        for key in 0..1000 {
            table.set(key, Some(format!("row {key}")));
        }
        let first = table.publish();
        assert_eq!(rows(&first).count(), 1000);
        table.set(7, Some("row 7, changed".into()));
        table.set(8, None);
        table.set(5000, None);
        let second = table.publish();
        let mut all: Vec<&str> = rows(&second).map(|r| r.as_str()).collect();
        all.sort_unstable();
        assert_eq!(all.len(), 999);
        assert!(all.contains(&"row 7, changed") && !all.contains(&"row 8"));
        let shared = first
            .iter()
            .zip(second.iter())
            .filter(|(a, b)| Arc::ptr_eq(a, b))
            .count();
        assert!(shared >= SHARDS - 2, "only the two changed shards are new");
    }
}
