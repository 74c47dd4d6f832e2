from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("alert_sessions", "0008_followups"),
    ]

    operations = [
        migrations.AddField(
            model_name="alertsession",
            name="events_pruned_through",
            field=models.BigIntegerField(default=0),
        ),
        migrations.AddIndex(
            model_name="alertsession",
            index=models.Index(fields=["events_pruned_through"], name="session_events_pruned"),
        ),
        migrations.AddIndex(
            model_name="llminteraction",
            index=models.Index(
                fields=[
                    "provider",
                    "model_name",
                    "error_code",
                    "duration_ms",
                    "input_tokens",
                    "output_tokens",
                    "thinking_tokens",
                ],
                name="llm_interaction_metrics",
            ),
        ),
        migrations.AddIndex(
            model_name="mcpinteraction",
            index=models.Index(
                fields=["interaction_type", "server_name", "tool_name", "duration_ms", "is_error"],
                name="mcp_interaction_metrics",
            ),
        ),
    ]
