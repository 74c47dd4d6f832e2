"""A second pass with detect-secrets' maintained token detectors (Yelp/detect-secrets).

Our own patterns cover what Kubernetes and cloud tooling print; these add the token
shapes of services we would otherwise have to track by hand (GitLab, Twilio, SendGrid,
Mailchimp, Square, Telegram, Discord, PyPI, Azure storage keys…).

Only detectors whose regexes run in linear time on any input are used: the JWT, npm and
OpenAI detectors backtrack quadratically (300 KB of ``sk-`` took 319 s), and the
keyword and high-entropy detectors mask evidence (hashes, pod UIDs, "password:" in
prose). Our own patterns cover JWTs, ``sk-`` keys and keyword assignments linearly.
"""

from __future__ import annotations

import re

from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector

from masking.patterns import marker

DETECTORS: tuple[RegexBasedDetector, ...] = tuple(
    detector()
    for detector in (
        AWSKeyDetector,
        AzureStorageKeyDetector,
        BasicAuthDetector,
        DiscordBotTokenDetector,
        GitHubTokenDetector,
        GitLabTokenDetector,
        MailchimpDetector,
        PypiTokenDetector,
        SendGridDetector,
        SlackDetector,
        SquareOAuthDetector,
        StripeDetector,
        TelegramBotTokenDetector,
        TwilioKeyDetector,
    )
)


def _marker(detector: RegexBasedDetector) -> str:
    return marker(re.sub(r"\W+", "_", detector.secret_type).strip("_"))


# Each detector's regexes, applied to the whole match: some capture only a prefix
# ("glpat" of a GitLab token), which detect-secrets' own analyze_string() then reports.
_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (regex, _marker(detector)) for detector in DETECTORS for regex in detector.denylist
)


def mask_detected(text: str) -> str:
    for regex, masked in _RULES:
        text = regex.sub(masked, text)
    return text
