"""The story's narration in Chinese: every step, answer and row of the books told in it."""

import pytest
from django.template.loader import render_to_string
from django.test import RequestFactory
from django.utils import translation

from demo.shop.story import story_run
from tests.demo.shop.test_story import GATEWAY_DELAY_S, WAIT_S
from tests.factories import UserFactory
from tests.i18n_text import english_phrases, visible_text

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_story_is_told_in_chinese_to_a_chinese_reader(
    sandbox, live_server, product, background_work
):
    UserFactory.create(username="staff", is_staff=True)  # scripts the provider's faults

    with translation.override("zh-hans"):
        report = story_run(base_url=live_server.url, gateway_delay_s=GATEWAY_DELAY_S, wait_s=WAIT_S)
        request = RequestFactory().get("/story/")
        request.user = UserFactory.create()
        page = render_to_string("storefront/story.html", {"report": report}, request=request)

    language, texts = visible_text(page)
    assert language == "zh-hans"
    assert not english_phrases(texts), english_phrases(texts)
    assert report.ok
    assert "顾客" in page  # the actors
    assert "点击" in page  # the steps
    assert "结清" in page  # who settled the payment
