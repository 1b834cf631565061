//! Watching a collection as kube-apiserver's `etcd3` watcher does: one etcd watch on the key
//! prefix from `resourceVersion + 1`, with previous values (a DELETED event carries the object
//! as it was) and progress notifications (the revision the store has reached with nothing to
//! say, which the watch cache turns into bookmarks). A put whose key was created at that revision
//! is ADDED, another put MODIFIED.

use std::collections::VecDeque;

use futures::Stream;
use keel_proto::etcdserverpb::watch_request::RequestUnion;
use keel_proto::etcdserverpb::{WatchCreateRequest, WatchProgressRequest, WatchRequest};
use keel_proto::mvccpb::event::EventType;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::{keys, Result, Storage, StorageError};

/// One change under a watched prefix, with the revision that made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Added {
        key: String,
        value: Vec<u8>,
        rev: i64,
    },
    /// `prev` is the object as it was before (when the store had it).
    Modified {
        key: String,
        value: Vec<u8>,
        prev: Option<Vec<u8>>,
        rev: i64,
    },
    /// `value` is the object as it was before the deletion.
    Deleted {
        key: String,
        value: Vec<u8>,
        rev: i64,
    },
    /// The store has reached this revision; nothing under the prefix changed meanwhile.
    Progress {
        rev: i64,
    },
}

/// What the watch stream keeps between polls: the request side (dropping it ends the watch),
/// the answers, and events already taken from an answer.
struct State {
    _requests: mpsc::Sender<WatchRequest>,
    responses: tonic::Streaming<keel_proto::etcdserverpb::WatchResponse>,
    ready: VecDeque<Change>,
    done: bool,
    /// The endpoint it runs on, to report its failure.
    endpoint: (usize, std::sync::Arc<super::Endpoints>),
}

/// Asks a running watch for a progress notification: the store answers with a `Progress` of
/// its current revision once it has sent every change up to it (etcd's `RequestProgress`).
#[derive(Clone)]
pub struct ProgressRequests(mpsc::Sender<WatchRequest>);

impl ProgressRequests {
    /// Asks; false if the watch has ended.
    pub fn request(&self) -> bool {
        let progress = WatchRequest { request_union: Some(RequestUnion::ProgressRequest(WatchProgressRequest {})) };
        !matches!(self.0.try_send(progress), Err(mpsc::error::TrySendError::Closed(_)))
    }
}

impl Storage {
    /// Every change under `prefix` after revision `after` (a resourceVersion), in revision
    /// order, until the stream is dropped. `Compacted` (as the stream's first item, then its end)
    /// if the store no longer has the revisions after `after`.
    pub async fn watch(&self, prefix: &str, after: i64) -> Result<impl Stream<Item = Result<Change>> + Send + 'static> {
        Ok(self.watch_with_progress(prefix, after).await?.0)
    }

    /// [`Storage::watch`], and a handle that asks it for progress notifications.
    pub async fn watch_with_progress(
        &self,
        prefix: &str,
        after: i64,
    ) -> Result<(impl Stream<Item = Result<Change>> + Send + 'static, ProgressRequests)> {
        let (tx, rx) = mpsc::channel(4);
        let create = WatchCreateRequest {
            key: prefix.as_bytes().to_vec().into(),
            range_end: keys::prefix_end(prefix.as_bytes()).into(),
            start_revision: after + 1,
            progress_notify: true,
            prev_kv: true,
            ..Default::default()
        };
        tx.send(WatchRequest { request_union: Some(RequestUnion::CreateRequest(create)) })
            .await
            .map_err(|_| StorageError::Store(tonic::Status::unavailable("watch request stream closed")))?;
        let (i, mut client, endpoints) = self.watch_client();
        let responses = match client.watch(ReceiverStream::new(rx)).await {
            Ok(r) => r.into_inner(),
            Err(s) => return Err(endpoints.failed(i, s)),
        };
        let progress = ProgressRequests(tx.clone());
        let encryption = self.encryption.clone();
        let state = State { _requests: tx, responses, ready: VecDeque::new(), done: false, endpoint: (i, endpoints) };
        let changes = futures::stream::unfold(state, move |mut st| {
            let encryption = encryption.clone();
            async move {
                let open = |key: &str, v: Vec<u8>| super::open(&encryption, key.as_bytes(), v);
                loop {
                    if let Some(change) = st.ready.pop_front() {
                        return Some((Ok(change), st));
                    }
                    if st.done {
                        return None;
                    }
                    let resp = match st.responses.message().await {
                        Ok(Some(resp)) => resp,
                        Ok(None) => return None,
                        Err(status) => {
                            st.done = true;
                            let e = st.endpoint.1.failed(st.endpoint.0, status);
                            return Some((Err(e), st));
                        }
                    };
                    if resp.compact_revision > 0 {
                        st.done = true;
                        return Some((Err(StorageError::Compacted(resp.compact_revision)), st));
                    }
                    if resp.canceled {
                        st.done = true;
                        let reason = format!("the store canceled the watch: {}", resp.cancel_reason);
                        return Some((Err(StorageError::Store(tonic::Status::aborted(reason))), st));
                    }
                    if resp.created {
                        continue;
                    }
                    if resp.events.is_empty() {
                        let rev = resp.header.as_ref().map_or(0, |h| h.revision);
                        st.ready.push_back(Change::Progress { rev });
                        continue;
                    }
                    for e in resp.events {
                        let Some(kv) = e.kv else { continue };
                        let key = String::from_utf8_lossy(&kv.key).into_owned();
                        let rev = kv.mod_revision;
                        st.ready.push_back(match EventType::try_from(e.r#type) {
                            Ok(EventType::Delete) => {
                                let value = open(&key, e.prev_kv.map(|p| p.value.to_vec()).unwrap_or_default());
                                Change::Deleted { key, value, rev }
                            }
                            _ if kv.create_revision == kv.mod_revision => {
                                let value = open(&key, kv.value.to_vec());
                                Change::Added { key, value, rev }
                            }
                            _ => Change::Modified {
                                value: open(&key, kv.value.to_vec()),
                                prev: e.prev_kv.map(|p| open(&key, p.value.to_vec())),
                                key,
                                rev,
                            },
                        });
                    }
                }
            }
        });
        Ok((changes, progress))
    }
}
