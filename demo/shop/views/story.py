"""The home page's "run the story" button: the same story as `manage.py story`."""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from demo.shop.access import chaos_required
from demo.shop.story import StoryUnavailable, story_run

# The button runs inside a web request: keep the waits for background work well
# inside gunicorn's 60 s worker timeout (the provider's scripted delay comes first).
WEB_WAIT_S = 15.0


@chaos_required
def run(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return redirect("storefront:home")
    try:
        report = story_run(wait_s=WEB_WAIT_S)
    except StoryUnavailable as error:
        return render(request, "storefront/story.html", {"error": str(error)})
    return render(request, "storefront/story.html", {"report": report})
