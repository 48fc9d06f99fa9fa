//! The future returned by [`Inbox`](super::Inbox).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use pin_project::pin_project;

use super::{InboxError, Receipt};

/// Resolves once the delivery's transaction has committed (`Ok`) or was
/// abandoned (`Err`). A named type, so that what happens inside can change
/// without changing the service's signature.
#[pin_project]
pub struct ResponseFuture {
    #[pin]
    inner: BoxFuture<'static, Result<Receipt, InboxError>>,
}

impl ResponseFuture {
    pub(super) fn new(inner: BoxFuture<'static, Result<Receipt, InboxError>>) -> Self {
        Self { inner }
    }
}

impl Future for ResponseFuture {
    type Output = Result<Receipt, InboxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().inner.poll(cx)
    }
}

impl fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
