from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("alert_sessions", "0006_search_and_session_totals"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="llminteraction",
            index=models.Index(fields=["created_at"], name="llm_interaction_created"),
        ),
    ]
