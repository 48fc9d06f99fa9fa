use sqlx::mysql::MySql;
use tower::{Layer, Service};

use super::{Applying, Batching, Inbox, InboxStore, Verdict};
use crate::db::Engine;
use crate::delivery::Delivery;
use crate::BoxError;

/// Wraps a service in an [`Inbox`]: deduplicate, run the service in the same
/// transaction, commit.
#[derive(Debug)]
pub struct InboxLayer<E: Engine = MySql> {
    store: InboxStore<E>,
    batching: Option<Batching<E>>,
}

impl<E: Engine> Clone for InboxLayer<E> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            batching: self.batching.clone(),
        }
    }
}

impl<E: Engine> InboxLayer<E> {
    /// A layer whose transactions run on `store`, one per delivery.
    pub fn new(store: InboxStore<E>) -> Self {
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
    pub fn batching(mut self, batching: Batching<E>) -> Self {
        self.batching = Some(batching);
        self
    }
}

impl<S, E: Engine> Layer<S> for InboxLayer<E>
where
    S: Service<Delivery<Applying<E>>, Response = Verdict<E>> + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send,
{
    type Service = Inbox<S, E>;

    fn layer(&self, inner: S) -> Inbox<S, E> {
        match &self.batching {
            None => Inbox::new(inner, self.store.clone()),
            Some(batching) => Inbox::batched(inner, self.store.clone(), batching.clone()),
        }
    }
}
