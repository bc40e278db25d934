//! What the pods owner hears on the side, without answering: where each
//! pod's operation is (admitted, releasing), the phase its worker wrote,
//! and the pods the runtime has sandboxes of.

use crate::pods::admit::admission::Admitted;
use crate::pods::pod::PodRef;
use crate::pods::run::pod_sync::ApiPhase;

/// What pods' operations (and the runtime's listings) tell the pods owner.
#[derive(Debug, Clone)]
pub(crate) enum Report {
    /// Pod `uid` was admitted; its worker starts.
    Admitted { uid: String, admitted: Admitted },
    /// Pod `uid`'s worker wrote `phase`.
    Phase { uid: String, phase: ApiPhase },
    /// Pod `uid`'s worker returned (`ended`: the pod ended, else it was
    /// told to stop); what it holds is being given back.
    Releasing {
        uid: String,
        ended: Option<ApiPhase>,
    },
    /// The pods the runtime has sandboxes of.
    RuntimePods(Vec<PodRef>),
}
