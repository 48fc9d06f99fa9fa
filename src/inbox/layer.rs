use tower::{Layer, Service};

use super::{Applying, Batching, Inbox, InboxStore, Verdict};
use crate::delivery::Delivery;
use crate::BoxError;

/// Wraps a service in an [`Inbox`]: deduplicate, run the service in the same
/// transaction, commit.
#[derive(Debug, Clone)]
pub struct InboxLayer {
    store: InboxStore,
    batching: Option<Batching>,
}

impl InboxLayer {
    /// A layer whose transactions run on `store`, one per delivery.
    pub fn new(store: InboxStore) -> Self {
        Self {
            store,
            batching: None,
        }
    }

    /// Batching mode: deliveries that are waiting when a transaction can
    /// start share it, each still answered on its own, and only after
    /// that transaction's COMMIT. See [`Batching`].
    ///
    /// ```no_run
    /// use result_inbox::inbox::{Batching, InboxLayer, InboxStore};
    ///
    /// # fn build(store: InboxStore) {
    /// // Up to 16 deliveries per transaction, 4 transactions at once.
    /// let layer = InboxLayer::new(store).batching(Batching::new(16));
    /// # let _ = layer;
    /// # }
    /// ```
    pub fn batching(mut self, batching: Batching) -> Self {
        self.batching = Some(batching);
        self
    }
}

impl<S> Layer<S> for InboxLayer
where
    S: Service<Delivery<Applying>, Response = Verdict> + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send,
{
    type Service = Inbox<S>;

    fn layer(&self, inner: S) -> Inbox<S> {
        match &self.batching {
            None => Inbox::new(inner, self.store.clone()),
            Some(batching) => Inbox::batched(inner, self.store.clone(), batching.clone()),
        }
    }
}
