"""Mid-run steering on the agents' side: before each model call, the notes an SRE added
to the session since the agent's last call join its conversation as user messages
("Guidance from <author>: …"), so the request carries them and the trace keeps them.

An agent starts with its cursor at 0: one that starts after a note was added (a later
stage, a synthesis, a sub-agent) gets every note of the session in its first call.
"""

from __future__ import annotations

from agents.recorder import Recorder, db
from llm.types import ConversationMessage, Role
from sessions import services
from sessions.models import SteeringNote


def guidance(note: SteeringNote) -> str:
    return f"Guidance from {note.author or 'an SRE'}: {note.text}"


class Steering:
    """The notes one agent execution has been given, by id: the next call reads only
    newer ones (one query), and each delivery is recorded under the session's lease."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.after = 0

    async def take(self) -> list[ConversationMessage]:
        notes = await db(services.steering_notes_take)(
            lease=self.recorder.lease, execution=self.recorder.execution, after=self.after
        )
        if notes:
            self.after = notes[-1].id
        return [ConversationMessage(Role.USER, guidance(note)) for note in notes]
