//! The network matrix `tomus topology measure` last measured: one record, replaced whole by
//! each measurement.

use tomus_wire::{Result, TopologyMatrix};

use super::{db_err, decode, encode, Store, TOPOLOGY};

/// The key of the one record.
const MATRIX: &str = "matrix";

impl Store {
    pub fn topology(&self) -> Result<Option<TopologyMatrix>> {
        let txn = self.read()?;
        let t = txn.open_table(TOPOLOGY).map_err(db_err)?;
        let got = t.get(MATRIX).map_err(db_err)?;
        got.map(|v| decode(v.value())).transpose()
    }

    pub fn put_topology(&self, m: &TopologyMatrix) -> Result<()> {
        let txn = self.write()?;
        {
            let mut t = txn.open_table(TOPOLOGY).map_err(db_err)?;
            t.insert(MATRIX, encode(m)?.as_slice()).map_err(db_err)?;
        }
        txn.commit().map_err(db_err)
    }
}
