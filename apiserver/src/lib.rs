//! keel-apiserver: a Kubernetes API server in front of an etcd v3 store (a keel cluster, a keel
//! member in the same process, or etcd itself). Work in progress (issue 9 of the plan,
//! `docs/apiserver-research.md`): the storage layer lays objects out and changes them exactly as
//! kube-apiserver does, so that a keel-apiserver and a kube-apiserver can share one store; kube's
//! errors ([`status`]) are written as kube writes them; discovery and a generic registry serve
//! the resources of the table in [`resources`] over HTTPS ([`server`], [`run`]).

pub mod admission;
pub mod apply;
pub mod audit;
pub mod auth;
pub mod bindings;
pub mod cache;
pub mod control;
pub mod crd;
pub mod deletion;
pub mod discovery;
pub mod events;
pub mod evictions;
pub mod managers;
pub mod meta;
pub mod openapi;
pub mod patch;
pub mod pods;
pub mod printers;
pub mod proto;
pub mod rbac;
pub mod reads;
pub mod resources;
pub mod rest;
pub mod run;
pub mod selector;
pub mod server;
pub mod services;
pub mod status;
pub mod storage;
pub mod table;
pub mod validation;
pub mod watch;
pub mod workloads;
