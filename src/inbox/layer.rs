use tower::Layer;

use super::{Inbox, InboxStore};

/// Wraps a service in an [`Inbox`]: deduplicate, run the service in the same
/// transaction, commit.
#[derive(Debug, Clone)]
pub struct InboxLayer {
    store: InboxStore,
}

impl InboxLayer {
    /// A layer whose transactions run on `store`.
    pub fn new(store: InboxStore) -> Self {
        Self { store }
    }
}

impl<S> Layer<S> for InboxLayer {
    type Service = Inbox<S>;

    fn layer(&self, inner: S) -> Inbox<S> {
        Inbox::new(inner, self.store.clone())
    }
}
