"""The domain: an alert session and everything that happened while investigating it.

Every state change is a row, written progressively by the worker; the event log
(``SessionEvent``, in ``events.py``) records each change in the same transaction so that
browsers can follow along and catch up after a disconnect.
"""

from sessions.models.dedup import KEPT_REPEATS, AlertFingerprint, AlertRepeat, SessionRepeats
from sessions.models.events import (
    SessionEvent,
    SessionEventType,
)
from sessions.models.followups import (
    OPEN_CHAT_MESSAGE_STATUSES,
    Chat,
    ChatMessage,
    ChatMessageStatus,
    FeedbackReflection,
    ReviewAction,
    ReviewActivity,
    ScoreStatus,
    SessionScore,
    SlackMessage,
)
from sessions.models.interactions import (
    LLMInteraction,
    MCPInteraction,
    answer_message,
)
from sessions.models.memory import (
    DEFAULT_PROJECT,
    InjectedMemory,
    InvestigationMemory,
    MemoryCategory,
    MemoryEvent,
    MemoryEventKind,
    MemoryValence,
)
from sessions.models.operations import (
    ApiToken,
    MCPServerHealth,
    SessionSearch,
    WorkerCluster,
)
from sessions.models.session import (
    RUNNING_SESSION_STATUSES,
    TERMINAL_SESSION_STATUSES,
    AgentExecution,
    AlertSession,
    ExecutionStatus,
    Message,
    MessageRole,
    ParallelType,
    QualityRating,
    ReviewStatus,
    SessionStatus,
    Stage,
    StageType,
    TimelineEvent,
    TimelineEventStatus,
    TimelineEventType,
)
from sessions.models.steering import SteeringDelivery, SteeringNote

__all__ = [
    "DEFAULT_PROJECT",
    "KEPT_REPEATS",
    "OPEN_CHAT_MESSAGE_STATUSES",
    "RUNNING_SESSION_STATUSES",
    "TERMINAL_SESSION_STATUSES",
    "AgentExecution",
    "AlertFingerprint",
    "AlertRepeat",
    "AlertSession",
    "ApiToken",
    "Chat",
    "ChatMessage",
    "ChatMessageStatus",
    "ExecutionStatus",
    "FeedbackReflection",
    "InjectedMemory",
    "InvestigationMemory",
    "LLMInteraction",
    "MCPInteraction",
    "MCPServerHealth",
    "MemoryCategory",
    "MemoryEvent",
    "MemoryEventKind",
    "MemoryValence",
    "Message",
    "MessageRole",
    "ParallelType",
    "QualityRating",
    "ReviewAction",
    "ReviewActivity",
    "ReviewStatus",
    "ScoreStatus",
    "SessionEvent",
    "SessionEventType",
    "SessionRepeats",
    "SessionScore",
    "SessionSearch",
    "SessionStatus",
    "SlackMessage",
    "Stage",
    "StageType",
    "SteeringDelivery",
    "SteeringNote",
    "TimelineEvent",
    "TimelineEventStatus",
    "TimelineEventType",
    "WorkerCluster",
    "answer_message",
]
