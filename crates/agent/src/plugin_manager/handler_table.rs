//! The handlers by plugin type, shared between the manager (which adds them)
//! and running registrations (which look them up), each under the
//! handlers' deadline ([`BoundedHandler`]).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::bounded_handler::BoundedHandler;
use super::config::HANDLER_TIMEOUT;
use crate::plugin_manager::handler::PluginHandler;

/// Plugin type → handler. Cheap to clone.
#[derive(Clone)]
pub(crate) struct HandlerTable {
    inner: Arc<RwLock<HashMap<String, Arc<dyn PluginHandler>>>>,
    limit: Duration,
}

impl Default for HandlerTable {
    fn default() -> Self {
        Self::new(HANDLER_TIMEOUT)
    }
}

impl HandlerTable {
    /// A table whose handlers' calls each end within `limit`.
    pub(crate) fn new(limit: Duration) -> Self {
        Self {
            inner: Arc::default(),
            limit,
        }
    }

    pub(crate) fn insert(&self, plugin_type: String, handler: Arc<dyn PluginHandler>) {
        let bounded = BoundedHandler::new(handler, plugin_type.clone(), self.limit);
        let mut map = self
            .inner
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        map.insert(plugin_type, Arc::new(bounded));
    }

    pub(crate) fn get(&self, plugin_type: &str) -> Option<Arc<dyn PluginHandler>> {
        let map = self
            .inner
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        map.get(plugin_type).cloned()
    }
}
