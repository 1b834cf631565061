//! keel-bench: load generator against etcd endpoints. Empty until the bench issue lands.
