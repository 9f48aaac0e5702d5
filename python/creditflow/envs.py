"""Interactive worlds for closing the training loop (docs/learn.md).

Small worlds in which what the policy writes decides what it sees next, and in which each
episode knows which turn mattered:

- ``SearchQA`` (LAPO, GRPO): the question asks what a subject is also called. The policy writes
  ``<search>SOURCE</search>`` twice, naming one of four sources; the one source that holds such
  facts (the atlas) returns the evidence ("<subject> is also called <NAME>."), the others return
  prose without a name. The policy then writes ``<answer>NAME</answer>``; the reward is 1 exactly
  when the name is the gold answer.
- ``WideSearch`` (LAPO, GRPO): the same question with eight sources and three searches, so that
  an episode that succeeds carries two searches that did not help.
- ``Rumour`` (``rumour``, LAPO's harmful turns): six searches among twelve sources; the atlas
  holds the name, three rumour sources name another (wrong) one in the atlas's own words, the
  rest give prose. Each episode records its rumour turns (``harmful_turns``).
- ``Household`` (ALFWorld-shaped, AttnSR): the task is to unlock a box whose code is written on
  a note kept in one place of the house (the desk). The policy opens three places
  (``open PLACE``); the place that holds the note shows the code; then it writes
  ``unlock BOX with CODE``. The reward is 1 exactly when the code is right.
- ``LongHousehold`` (``household-long``, AttnSR's longer case): ten moves, then the unlock. The
  policy walks between rooms (``go to ROOM``) and opens the places of the room it is in
  (``open PLACE``); the desk, which holds the note with the code, is in the office and opens
  only there. Two places hold an "old note" naming a wrong code, which a policy that copies
  what it read last will copy. Each episode knows the turn that showed the code
  (``key_turns``), the walk into the office that made it possible (``enabling_turns``) and the
  turns that showed an old note (``harmful_turns``).

All are built so that credit assignment can matter: a policy that picks its queries (places)
at random finds the evidence in a minority of episodes, the outcome reward alone cannot tell
the turn that found the evidence from the turns that did not, and a policy that learns where
the evidence is kept succeeds almost always.

An episode is deterministic in its seed: ``env.reset(seed)`` draws the question and the gold
answer; ``env.step(action_text)`` returns the next observation; ``env.reward(answer_text)``
scores the final action. ``Episode.key_turns`` lists the turns whose observation held the
evidence (the ground truth of "which turn mattered").

Text is plain ASCII; the built-in tiny model's tokenizer is bytes (creditflow.byte_tokenizer).
Only the standard library is used here.
"""

import random
from dataclasses import dataclass, field

__all__ = ["SearchQA", "WideSearch", "Rumour", "Household", "LongHousehold", "Episode", "NAMES", "make_env", "judge", "judge_errs", "ENVS"]

#: Gold answers and codes: the 26 made-up names of creditflow's synthetic worlds (one per
#: initial, in capital letters; every other word the worlds write is lowercase), which the
#: built-in tiny model learned to copy from its context.
NAMES = ["AUKRIZOUL", "BEKUBOU", "CIKRUMOU", "DESTEBRAI", "EAINOUKREL", "FAIDAIRAITH", "GROZOUSKUR", "HOUDOUPAN",
         "IRISTIBETH", "JALAKREX", "KODIKOU", "LADRADIN", "MROUKRENAITH", "NOUPUBEN", "OEZENAIX", "PODERATH",
         "QOUFEDRA", "RUGUSOU", "SRIDESKAIN", "TAIFOBI", "UOMEGOTH", "VAILIFOUTH", "WUBREMOUTH", "XAIKEKRO",
         "YRAIPOZUL", "ZIZAIKU"]


@dataclass
class Episode:
    """One episode's state: the prompt, the turns so far, the ground truth."""
    seed: int
    prompt: str
    gold: str
    right: str                       # the query (place) that reveals the evidence
    turns: list = field(default_factory=list)   # (kind, action_text, observation_text)
    key_turns: list = field(default_factory=list)  # indexes of turns whose observation held the evidence
    done: bool = False
    answer: str = None
    correct: bool = False            # the answer is the gold answer (the truth, whatever a judge says)
    reward: float = 0.0


class _World:
    """What both worlds share: a fixed number of information turns, then one answer turn."""
    name = ""
    info_kind = "search"
    info_turns = 2
    options = []           # the queries (places) a well-formed action names
    stop = ""              # every action ends with this text
    max_action_bytes = 40

    def reset(self, seed: int) -> Episode:
        raise NotImplementedError

    def phase(self, ep: Episode) -> str:
        """'info' while information turns remain, then 'answer', then 'done'."""
        if ep.done:
            return "done"
        return "info" if len(ep.turns) < self.info_turns else "answer"

    def kind(self, ep: Episode) -> str:
        return self.info_kind if self.phase(ep) == "info" else "answer"

    def step(self, ep: Episode, action: str) -> str:
        """Applies the policy's action text; returns the observation ('' after the answer)."""
        if self.phase(ep) == "info":
            query = self.parse_query(action)
            hit = query is not None and query == ep.right
            obs = self.observe(ep, query, hit)
            if hit:
                ep.key_turns.append(len(ep.turns))
            ep.turns.append((self.info_kind, action, obs))
            return obs
        if self.phase(ep) == "answer":
            ep.answer = self.parse_answer(action)
            ep.correct = ep.answer == ep.gold
            ep.reward = 1.0 if ep.correct else 0.0
            ep.turns.append(("answer", action, ""))
            ep.done = True
            return ""
        raise ValueError("the episode is over")

    def parse_query(self, action):
        raise NotImplementedError

    def parse_answer(self, action):
        raise NotImplementedError

    def observe(self, ep, query, hit):
        raise NotImplementedError

    def expert_action(self, ep: Episode, rng: random.Random, p_right=0.0) -> str:
        """The warm start's demonstrations: the right query (place) with probability `p_right`,
        otherwise one picked uniformly among the options; the answer copies the evidence when
        it was seen (a random name otherwise)."""
        if self.phase(ep) == "info":
            return self.format_query(ep.right if rng.random() < p_right else rng.choice(self.options))
        seen = bool(ep.key_turns)
        return self.format_answer(ep, ep.gold if seen else rng.choice(NAMES))

    def oracle_action(self, ep: Episode) -> str:
        """The best policy: the right query (place) first, then the gold answer."""
        if self.phase(ep) == "info":
            return self.format_query(ep.right)
        return self.format_answer(ep, ep.gold)


class SearchQA(_World):
    """Search-QA, interactive: two searches, one answer (docs/learn.md)."""
    name = "searchqa"
    info_kind = "search"
    #: sources: each has a distinct first letter, so the query is decided by its first byte.
    options = ["atlas", "forum", "news", "wiki"]
    reliable = "atlas"
    subjects = ["lisbon", "kyoto", "oslo", "the danube"]
    stop = "</search>"
    fillers = ["according to the archive", "historians note", "records show", "the encyclopedia says"]

    def reset(self, seed):
        r = random.Random("searchqa/%d" % seed)
        subject, gold = r.choice(self.subjects), r.choice(NAMES)
        prompt = ("<|user|> answer the question. use <search>source</search> to search atlas, forum, news or "
                  "wiki. question: what is %s also called? <|assistant|>" % subject)
        ep = Episode(seed=seed, prompt=prompt, gold=gold, right=self.reliable)
        ep.subject = subject
        return ep

    def format_query(self, q):
        return "<search>%s</search>" % q

    def format_answer(self, ep, name):
        return "<answer>%s</answer>" % name

    def stop_for(self, ep):
        return "</search>" if self.phase(ep) == "info" else "</answer>"

    def parse_query(self, action):
        a = action.strip()
        if not (a.startswith("<search>") and a.endswith("</search>")):
            return None
        q = a[len("<search>"):-len("</search>")].strip()
        return q if q in self.options else None

    def parse_answer(self, action):
        a = action.strip()
        if a.startswith("<answer>") and a.endswith("</answer>"):
            return a[len("<answer>"):-len("</answer>")].strip()
        return None

    def observe(self, ep, query, hit):
        r = random.Random("searchqa/%d/%d" % (ep.seed, len(ep.turns)))
        if hit:
            return "<information>%s, %s is also called %s.</information>" % (r.choice(self.fillers), ep.subject, ep.gold)
        if query is None:
            return "<information>no results.</information>"
        return "<information>%s, %s is a %s.</information>" % (
            r.choice(self.fillers), ep.subject, "place" if ep.subject != "the danube" else "river")


class WideSearch(SearchQA):
    """Search-QA with more places to look (docs/learn.md): eight sources, three searches, the
    atlas still the only one that holds the name. A successful episode carries two searches that
    did not help, and its outcome reward credits them as much as the one that did."""
    name = "widesearch"
    info_turns = 3
    options = ["atlas", "blog", "chat", "diary", "forum", "gazette", "news", "wiki"]

    def reset(self, seed):
        ep = super().reset(seed)
        ep.prompt = ep.prompt.replace("to search atlas, forum, news or wiki.",
                                      "to search atlas, blog, chat, diary, forum, gazette, news or wiki.")
        return ep


class Rumour(SearchQA):
    """Search-QA with harmful turns (``rumour``, docs/learn.md "The rumour world"): six searches
    among twelve sources. The atlas holds the name; three rumour sources (blog, chat, forum)
    say, in the atlas's own words (the same sentences), that the subject is also called another
    name (one wrong name per episode, the same in all three), so that only the search that
    produced it tells a rumour from the evidence, and a policy that copies a name from its
    context may copy the wrong one; the other eight sources return prose. The demonstrations
    (``expert_action``) are the other search worlds': the answer copies the gold name when the
    atlas was searched. Each episode records the turns that showed
    the name (``key_turns``) and those that showed the rumour (``harmful_turns``): the ground
    truth an oracle-credit arm needs. The episode is replayable from its seed and its actions."""
    name = "rumour"
    info_turns = 6
    options = ["atlas", "blog", "chat", "diary", "forum", "gazette", "hearsay", "journal", "memo", "news",
               "tabloid", "wiki"]
    rumours = ["blog", "chat", "forum"]

    def reset(self, seed):
        ep = super().reset(seed)
        r = random.Random("rumour/%d" % seed)
        ep.wrong = r.choice([n for n in NAMES if n != ep.gold])
        ep.harmful_turns = []
        ep.prompt = ep.prompt.replace("to search atlas, forum, news or wiki.",
                                      "to search %s or %s." % (", ".join(self.options[:-1]), self.options[-1]))
        return ep

    def step(self, ep, action):
        if self.phase(ep) == "info":
            t = len(ep.turns)
            if self.parse_query(action) in self.rumours:
                ep.harmful_turns.append(t)
        return super().step(ep, action)

    def observe(self, ep, query, hit):
        if query in self.rumours:
            r = random.Random("searchqa/%d/%d" % (ep.seed, len(ep.turns)))
            return "<information>%s, %s is also called %s.</information>" % (r.choice(self.fillers), ep.subject, ep.wrong)
        return super().observe(ep, query, hit)


class Household(_World):
    """ALFWorld-shaped, interactive: three places opened, one unlock (docs/learn.md)."""
    name = "household"
    info_kind = "tool"
    info_turns = 3
    options = ["drawer", "shelf", "fridge", "cabinet", "desk", "dresser"]
    boxes = ["safe", "locker", "chest", "strongbox"]
    #: where the codes are kept (fixed: a policy can learn it)
    keep = "desk"
    things = ["a mug", "an apple", "a plate", "a book", "a candle", "a towel"]

    def reset(self, seed):
        r = random.Random("household/%d" % seed)
        box, gold = r.choice(self.boxes), r.choice(NAMES)
        prompt = "<|user|> you are in a household. your task is to: unlock the %s and take what is inside. <|assistant|>" % box
        ep = Episode(seed=seed, prompt=prompt, gold=gold, right=self.keep)
        ep.box = box
        return ep

    def format_query(self, q):
        return "open %s\n" % q

    def format_answer(self, ep, name):
        return "unlock %s with %s\n" % (ep.box, name)

    def stop_for(self, ep):
        return "\n"

    def parse_query(self, action):
        a = action.strip()
        if not a.startswith("open "):
            return None
        q = a[len("open "):].strip()
        return q if q in self.options else None

    def parse_answer(self, action):
        words = action.strip().split()
        if len(words) == 4 and words[0] == "unlock" and words[2] == "with":
            return words[3]
        return None

    def observe(self, ep, query, hit):
        r = random.Random("household/%d/%d" % (ep.seed, len(ep.turns)))
        if hit:
            return "you open the %s. inside is a note: the %s code is %s.\n" % (query, ep.box, ep.gold)
        if query is None:
            return "nothing happens.\n"
        return "you open the %s. you see %s.\n" % (query, r.choice(self.things))


class LongHousehold(Household):
    """ALFWorld-shaped and longer (docs/learn.md): ten moves among rooms and places, then one
    unlock. ``go to ROOM`` walks (the episode starts in the hall); ``open PLACE`` opens a place
    of the room the policy is in ("there is no PLACE here." elsewhere). The desk is in the
    office and holds the note with the code; the drawer (bedroom) and the cabinet (kitchen)
    hold old notes naming one wrong code, the same in both; every other place holds a thing."""
    name = "household-long"
    info_turns = 10
    rooms = {"hall": ["closet"], "kitchen": ["fridge", "cabinet"], "bedroom": ["drawer", "dresser"],
             "office": ["desk", "shelf"]}
    places = [p for ps in rooms.values() for p in ps]
    options = ["go to %s" % r for r in rooms] + ["open %s" % p for p in places]
    start = "hall"
    keep = "desk"
    stale = ["drawer", "cabinet"]  #: the places of the old notes

    def reset(self, seed):
        r = random.Random("household-long/%d" % seed)
        box, gold = r.choice(self.boxes), r.choice(NAMES)
        wrong = r.choice([n for n in NAMES if n != gold])
        prompt = ("<|user|> you are in the hall of a house with a kitchen, a bedroom and an office. your task "
                  "is to: unlock the %s and take what is inside. <|assistant|>" % box)
        ep = Episode(seed=seed, prompt=prompt, gold=gold, right="open " + self.keep)
        ep.box, ep.wrong, ep.room = box, wrong, self.start
        ep.enabling_turns, ep.harmful_turns = [], []
        return ep

    def room_of(self, place):
        return next(r for r, ps in self.rooms.items() if place in ps)

    def format_query(self, q):
        return q + "\n"

    def parse_query(self, action):
        a = " ".join(action.strip().split())
        return a if a in self.options else None

    def step(self, ep, action):
        if self.phase(ep) != "info":
            return super().step(ep, action)
        t = len(ep.turns)
        q = self.parse_query(action)
        if q is None:
            obs = "nothing happens.\n"
        elif q.startswith("go to "):
            room = q[len("go to "):]
            if room == "office" and ep.room != "office":
                ep.enabling_turns.append(t)
            ep.room = room
            obs = "you are in the %s. you see %s.\n" % (room, " and ".join("a " + p for p in self.rooms[room]))
        else:
            place = q[len("open "):]
            if self.room_of(place) != ep.room:
                obs = "there is no %s here.\n" % place
            elif place == self.keep:
                obs = "you open the %s. inside is a note: the %s code is %s.\n" % (place, ep.box, ep.gold)
                ep.key_turns.append(t)
            elif place in self.stale:
                obs = "you open the %s. inside is an old note: the %s code was %s.\n" % (place, ep.box, ep.wrong)
                ep.harmful_turns.append(t)
            else:
                rr = random.Random("household-long/%d/%d" % (ep.seed, t))
                obs = "you open the %s. you see %s.\n" % (place, rr.choice(self.things))
        ep.turns.append((self.info_kind, action, obs))
        return obs

    def expert_action(self, ep, rng, p_right=0.0):
        """Demonstrations: a move picked uniformly among the options (with probability
        `p_right` the next move of the shortest path to the note: go to the office, open the
        desk); the unlock copies the code of the last note seen (a random name when none)."""
        if self.phase(ep) == "info":
            if rng.random() < p_right:
                return self.oracle_action(ep)
            return self.format_query(rng.choice(self.options))
        seen = [obs for _, _, obs in ep.turns if "code is " in obs or "code was " in obs]
        name = seen[-1].split()[-1].rstrip(".") if seen else rng.choice(NAMES)
        return self.format_answer(ep, name)

    def oracle_action(self, ep):
        """The best policy: to the office, open the desk, then anything; the unlock with the code."""
        if self.phase(ep) == "info":
            if ep.key_turns:
                return self.format_query("open shelf" if ep.room == "office" else "go to hall")
            return self.format_query("open desk" if ep.room == "office" else "go to office")
        return self.format_answer(ep, ep.gold)


def judge(ep: Episode, noise: float, key: str) -> float:
    """A flaky judge's outcome reward for a finished episode (docs/learn.md, "LAPO against GRPO when
    the judge errs"):
    with probability `noise` its verdict is wrong (1 for a wrong answer, 0 for the right one),
    independently of how the episode was played and deterministic in `key` (the trajectory id:
    episodes of one group share their seed). ``ep.correct`` keeps the truth; held-out
    evaluation counts it, never the judge."""
    if not 0 <= noise < 0.5:
        raise ValueError("judge noise %r: want 0 <= noise < 0.5" % (noise,))
    if not ep.done:
        raise ValueError("the episode is not over")
    return 1.0 if ep.correct != judge_errs(noise, key) else 0.0


def judge_errs(noise: float, key: str) -> bool:
    """The judge's draw for trajectory `key`: True where its verdict is wrong (probability
    `noise`, deterministic in `key`)."""
    return noise > 0 and random.Random("judge/" + key).random() < noise


ENVS = {"searchqa": SearchQA, "widesearch": WideSearch, "rumour": Rumour, "household": Household, "household-long": LongHousehold}


def make_env(name: str):
    """The world named `name` (searchqa, widesearch, rumour, household or household-long)."""
    try:
        return ENVS[name]()
    except KeyError:
        raise ValueError("unknown world %r (want %s)" % (name, " or ".join(ENVS))) from None
