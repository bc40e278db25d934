//! The handlers by plugin type, shared between the manager (which adds them)
//! and running registrations (which look them up).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::handler::PluginHandler;

/// Plugin type → handler. Cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct HandlerTable {
    inner: Arc<RwLock<HashMap<String, Arc<dyn PluginHandler>>>>,
}

impl HandlerTable {
    pub(crate) fn insert(&self, plugin_type: String, handler: Arc<dyn PluginHandler>) {
        let mut map = self
            .inner
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        map.insert(plugin_type, handler);
    }

    pub(crate) fn get(&self, plugin_type: &str) -> Option<Arc<dyn PluginHandler>> {
        let map = self
            .inner
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        map.get(plugin_type).cloned()
    }
}
