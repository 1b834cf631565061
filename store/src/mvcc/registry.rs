//! Replicated cluster facts kept beside the keyspace: what each member published about itself
//! (name, client URLs) and the raised alarms. Both are small, change rarely, and are written as one
//! record (`m` + [`keys::meta::REGISTRY`]) in the same batch as the entry that changed them, so they travel in
//! snapshots and survive restarts like the data. Peer URLs and learner status are not here: they
//! are Raft's membership.

use std::collections::{BTreeMap, BTreeSet};

use keel_proto::etcdserverpb::{alarm_request::AlarmAction, AlarmMember, AlarmRequest, AlarmResponse, AlarmType};
use serde::{Deserialize, Serialize};

use super::ApplyBatch;
use crate::engine::Engine;
use crate::error::Result;
use crate::mvcc::keys;

/// What a running member publishes about itself (etcd's member attributes).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attributes {
    pub name: String,
    pub client_urls: Vec<String>,
}

/// The registry: member attributes by member id, and alarms as (member id, alarm type).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registry {
    pub attributes: BTreeMap<u64, Attributes>,
    pub alarms: BTreeSet<(u64, i32)>,
}

impl Registry {
    /// Reads the registry record (empty on a new store).
    pub fn load(engine: &dyn Engine) -> Result<Registry> {
        match engine.get(&keys::sm_meta(keys::meta::REGISTRY))? {
            None => Ok(Registry::default()),
            Some(b) => Ok(bincode::deserialize(&b)?),
        }
    }

    /// Whether writes that need space are refused (etcd's NOSPACE alarm is raised).
    pub fn no_space(&self) -> bool {
        self.alarms.iter().any(|(_, a)| *a == AlarmType::Nospace as i32)
    }

    /// The alarms of one type (all of them for `NONE`), as etcd reports them.
    pub fn alarms(&self, kind: i32) -> Vec<AlarmMember> {
        self.alarms
            .iter()
            .filter(|(_, a)| kind == AlarmType::None as i32 || *a == kind)
            .map(|(m, a)| AlarmMember { member_id: *m, alarm: *a })
            .collect()
    }
}

/// Applies a member's published attributes.
pub fn publish(batch: &mut ApplyBatch, id: u64, attributes: &Attributes) {
    batch.registry_mut().attributes.insert(id, attributes.clone());
}

/// Applies etcd's Alarm request: get, activate (answers the alarm, new or already raised) or
/// deactivate (answers the alarm if it was raised).
pub fn alarm(batch: &mut ApplyBatch, req: &AlarmRequest) -> AlarmResponse {
    let key = (req.member_id, req.alarm);
    let alarms = match AlarmAction::try_from(req.action) {
        Ok(AlarmAction::Get) => batch.registry().alarms(req.alarm),
        Ok(AlarmAction::Activate) if req.alarm != AlarmType::None as i32 => {
            batch.registry_mut().alarms.insert(key);
            vec![AlarmMember { member_id: req.member_id, alarm: req.alarm }]
        }
        Ok(AlarmAction::Deactivate) if batch.registry().alarms.contains(&key) => {
            batch.registry_mut().alarms.remove(&key);
            vec![AlarmMember { member_id: req.member_id, alarm: req.alarm }]
        }
        _ => Vec::new(),
    };
    AlarmResponse { header: None, alarms }
}
