//! The site files a pass creates: pending (invisible) until their first version is published
//! there. Left pending, such a name holds its path on the site until the site's collector
//! drops it (the GC grace, an hour by default), and a later scan may need the path for a
//! directory: the source's file may be gone by then. So what a pass created and did not
//! publish is given up when the pass ends, however it ends, and also when its task goes away
//! in the middle (a rule changed or removed aborts it).

use tomus_client::Client;
use tomus_wire::FsEntry;

use crate::replay::Cursor;

/// New site files of one pass.
pub(crate) struct Created {
    target: Client,
    pub(crate) entries: Vec<FsEntry>,
}

impl Created {
    pub(crate) fn new(target: &Client) -> Self {
        Created {
            target: target.clone(),
            entries: Vec::new(),
        }
    }

    /// The pass ended: gives up those the cursor does not record as published.
    pub(crate) async fn settle(mut self, cursor: &Cursor) {
        let ns = self.target.namespace();
        for entry in std::mem::take(&mut self.entries) {
            let published = cursor
                .files
                .get(&entry.path)
                .is_some_and(|c| entry.blob.as_ref().is_some_and(|b| b.id == c.dst_blob));
            if !published {
                ns.abandon(&entry).await;
            }
        }
    }
}

impl Drop for Created {
    /// The pass went away before it ended: gives up every one of them in the background
    /// (giving up a file whose first version was published leaves it alone).
    fn drop(&mut self) {
        let entries = std::mem::take(&mut self.entries);
        if entries.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let ns = self.target.namespace();
        runtime.spawn(async move {
            for entry in entries {
                ns.abandon(&entry).await;
            }
        });
    }
}
