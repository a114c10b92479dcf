"""The procedural multi-hop knowledge base (the offline default corpus, environments.md §9).

Fictional countries, cities, people, companies, films and books with the relations born-in, located-in, founded-by,
headquartered-in, directed-by, written-by and birth / founding years; one 2-4 sentence document per entity. Every
entity name carries a pseudo-word no other entity uses, so a search for a name finds its document. Each document
states only its own entity's facts (a person's document never names their films), so every question needs two
documents: the one about the entity it names and the one about the entity that document leads to.

Templates (answers known by construction):

* ``film-director-city``: "In which city was the director of {film} born?"   film -> director -> city
* ``book-author-year``: "In what year was the author of {book} born?"          book -> author -> year
* ``company-hq-country``: "In which country is the headquarters of {company}?" company -> city -> country
* ``company-founder-year``: "In what year was the founder of {company} born?"  company -> founder -> year
* ``company-founded-earlier``: "Which company was founded earlier, {A} or {B}?" (comparison of two documents)

Everything comes from one ``numpy.random.Generator(kb_seed)``: the KB is independent of episode seeds.
"""

from __future__ import annotations

from functools import lru_cache

import attrs
import numpy as np

from ragen import ConfigError
from ragen_searchqa.data import Dataset, Doc, Question, partition

MIN_KB_SIZE = 60

# Pseudo-words: consonant-vowel syllables, the last one closed by a coda that English stemmers never strip (no
# -s, -e, -y, -ed, -er, -ing, -ion, -ent...), so two names never share a stem.
_ONSETS = ("b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "gr", "kr", "tr",
           "st", "sk", "th", "pl", "vr")
_VOWELS = ("a", "e", "i", "o", "u")
_FINAL_VOWELS = ("a", "o", "u")
_CODAS = ("k", "x", "th", "rn", "nd", "rk", "lt", "m", "n", "sk", "rv")

_REGIONS = ("the northern hemisphere", "the southern hemisphere", "the eastern archipelago", "the western plains",
            "the central highlands", "the polar north")
_CITY_FEATURES = (
    "its old harbour",
    "its textile markets",
    "its university",
    "its stone bridges",
    "its spring festival",
    "its glassworks",
    "its botanical garden",
    "its railway museum",
)
_PROFESSIONS = {
    "director": ("film director", "filmmaker"),
    "author": ("novelist", "writer"),
    "founder": ("entrepreneur", "engineer", "industrialist"),
    "other": ("painter", "architect", "chemist", "composer", "athlete", "photographer", "surgeon", "historian"),
}
_TRAITS = ("is known for a quiet and methodical style", "often speaks about the value of patience",
           "spent several years travelling before settling down", "has received many awards over a long career",
           "is admired by colleagues for careful preparation", "taught for a decade before becoming famous")
_INDUSTRIES = (
    "shipping",
    "software",
    "textile",
    "energy",
    "food",
    "publishing",
    "robotics",
    "mining",
    "pharmaceutical",
    "aviation",
)
_COMPANY_SUFFIXES = (
    "Industries",
    "Systems",
    "Labs",
    "Holdings",
    "Motors",
    "Foods",
    "Group",
    "Works",
    "Energy",
    "Media",
)
_FILM_GENRES = ("drama", "comedy", "thriller", "science fiction", "documentary", "war", "romance", "horror")
_BOOK_GENRES = ("historical", "crime", "fantasy", "mystery", "adventure", "satirical", "romantic", "science fiction")
_TITLE_NOUNS = ("Harbor", "Night", "Crown", "River", "Garden", "Winter", "Mirror", "Lantern", "Storm", "Bridge",
                "Silence", "Orchard", "Tower", "Voyage", "Letter")
_TITLE_ADJECTIVES = ("Silent", "Last", "Golden", "Broken", "Hidden", "Distant", "Burning", "Quiet", "Lost", "Crimson")


@attrs.frozen
class Person:
    id: str
    name: str
    role: str
    profession: str
    city: str
    birth_year: int
    pronoun: str
    trait: str


@attrs.frozen
class Company:
    id: str
    name: str
    industry: str
    founder: Person
    year: int
    city: str
    employees: int


def _a(phrase: str) -> str:
    """The phrase with its indefinite article."""
    return f"{'an' if phrase[0] in 'aeiou' else 'a'} {phrase}"


class _Names:
    """Unique capitalised pseudo-words drawn from the KB generator."""

    def __init__(self, rng: np.random.Generator, reserved: set[str]):
        self.rng, self.used = rng, set(reserved)

    def word(self) -> str:
        while True:
            n_open = int(self.rng.integers(1, 3))  # 1-2 open syllables, then the closed one
            parts = [self._pick(_ONSETS) + self._pick(_VOWELS) for _ in range(n_open)]
            parts.append(self._pick(_ONSETS) + self._pick(_FINAL_VOWELS) + self._pick(_CODAS))
            word = "".join(parts)
            if word not in self.used:
                self.used.add(word)
                return word.capitalize()

    def _pick(self, options: tuple[str, ...]) -> str:
        return options[int(self.rng.integers(len(options)))]


def _sizes(kb_size: int) -> dict[str, int]:
    """Entity counts for ``kb_size`` documents: 1 % countries, 6 % cities, 15 % companies, 15 % films, 17 % books,
    the rest people."""
    counts = {
        "country": max(3, round(0.01 * kb_size)),
        "city": max(6, round(0.06 * kb_size)),
        "company": max(4, round(0.15 * kb_size)),
        "film": max(3, round(0.15 * kb_size)),
        "book": max(3, round(0.17 * kb_size)),
    }
    counts["person"] = kb_size - sum(counts.values())
    return counts


@lru_cache(maxsize=4)
def build_kb(kb_seed: int = 0, kb_size: int = 2000, val_size: int | None = None) -> Dataset:
    """The knowledge base of ``kb_size`` documents and its questions (cached: many envs share one KB)."""
    if kb_size < MIN_KB_SIZE:
        raise ConfigError(f"kb_size: must be >= {MIN_KB_SIZE}, got {kb_size}")
    return _Builder(np.random.default_rng(kb_seed), _sizes(kb_size)).build(f"synthetic/k{kb_seed}n{kb_size}", val_size)


class _Builder:
    def __init__(self, rng: np.random.Generator, sizes: dict[str, int]):
        self.rng, self.sizes = rng, sizes
        reserved = {w.lower() for text in (_REGIONS, _CITY_FEATURES, _TRAITS, _TITLE_NOUNS, _TITLE_ADJECTIVES)
                    for phrase in text for w in phrase.split()}
        self.names = _Names(rng, reserved)
        self.docs: list[Doc] = []
        self.first_names: list[str] = []

    def _int(self, lo: int, hi: int) -> int:
        """Uniform in [lo, hi]."""
        return int(self.rng.integers(lo, hi + 1))

    def _choice(self, options):
        return options[int(self.rng.integers(len(options)))]

    def build(self, key: str, val_size: int | None) -> Dataset:
        city_country = self._places()
        cities = list(city_country)
        n_people = self.sizes["person"]
        n_directors = max(1, self.sizes["film"] // 2)
        n_authors = max(1, self.sizes["book"] // 2)
        n_founders = self.sizes["company"]
        if n_directors + n_authors + n_founders > n_people:
            raise ConfigError("kb_size: too small for the people its films, books and companies need")
        roles = ["director"] * n_directors + ["author"] * n_authors + ["founder"] * n_founders
        roles += ["other"] * (n_people - len(roles))
        self.first_names = [self.names.word() for _ in range(max(10, n_people // 5))]
        people = [self._person(i, role, cities) for i, role in enumerate(roles)]
        by_role = {r: [p for p in people if p.role == r] for r in _PROFESSIONS}
        companies = [self._company(i, founder, cities) for i, founder in enumerate(by_role["founder"])]
        films = [self._film(i, by_role["director"]) for i in range(self.sizes["film"])]
        books = [self._book(i, by_role["author"]) for i in range(self.sizes["book"])]
        questions = self._questions(city_country, companies, films, books)
        train, held_out = partition(questions, val_size)
        return Dataset(key, key, tuple(self.docs), train, held_out)

    # ---- entities and their documents -----------------------------------------------------------------------------
    def _places(self) -> dict[str, str]:
        countries = [self.names.word() for _ in range(self.sizes["country"])]
        cities = [self.names.word() for _ in range(self.sizes["city"])]
        # every country gets at least one city (its capital); the rest are spread at random
        city_country = {
            c: countries[i] if i < len(countries) else self._choice(countries) for i, c in enumerate(cities)
        }
        for i, country in enumerate(countries):
            capital = cities[i]
            self.docs.append(Doc(f"country{i:04d}", country, (
                f"{country} is a country in {self._choice(_REGIONS)}. Its capital is {capital}. "
                f"It has a population of about {self._int(2, 90)} million people.")))
        for i, city in enumerate(cities):
            self.docs.append(Doc(f"city{i:04d}", city, (
                f"{city} is a city in {city_country[city]}. It has about {self._int(20, 900) * 1000:,} inhabitants "
                f"and is known for {self._choice(_CITY_FEATURES)}.")))
        return city_country

    def _person(self, i: int, role: str, cities: list[str]) -> Person:
        name = f"{self._choice(self.first_names)} {self.names.word()}"  # surnames are unique, first names repeat
        person = Person(f"person{i:04d}", name, role, self._choice(_PROFESSIONS[role]), self._choice(cities),
                        self._int(1900, 1985), self._choice(("He", "She")), self._choice(_TRAITS))
        self.docs.append(Doc(person.id, name, (
            f"{name} is {_a(person.profession)} who was born in {person.city} in {person.birth_year}. "
            f"{person.pronoun} {person.trait}.")))
        return person

    def _company(self, i: int, founder: Person, cities: list[str]) -> Company:
        name = f"{self.names.word()} {self._choice(_COMPANY_SUFFIXES)}"
        company = Company(
            f"company{i:04d}",
            name,
            self._choice(_INDUSTRIES),
            founder,
            min(2020, founder.birth_year + self._int(20, 55)),
            self._choice(cities),
            self._int(1, 400) * 100,
        )
        self.docs.append(Doc(company.id, name, (
            f"{name} is {_a(company.industry)} company founded by {founder.name} in {company.year}. "
            f"It is headquartered in {company.city}. The company employs about {company.employees:,} people.")))
        return company

    def _title(self) -> str:
        word = self.names.word()
        pattern = int(self.rng.integers(4))
        if pattern == 0:
            return f"The {self._choice(_TITLE_NOUNS)} of {word}"
        if pattern == 1:
            return f"{word} {self._choice(_TITLE_NOUNS)}"
        if pattern == 2:
            return f"The {self._choice(_TITLE_ADJECTIVES)} {word}"
        return f"{word}'s {self._choice(_TITLE_NOUNS)}"

    def _film(self, i: int, directors: list[Person]) -> tuple[str, Person]:
        title, director = self._title(), self._choice(directors)
        year = min(2024, director.birth_year + self._int(22, 60))
        self.docs.append(Doc(f"film{i:04d}", title, (
            f"{title} is a {year} {self._choice(_FILM_GENRES)} film directed by {director.name}. "
            f"It runs for {self._int(80, 170)} minutes.")))
        return title, director

    def _book(self, i: int, authors: list[Person]) -> tuple[str, Person]:
        title, author = self._title(), self._choice(authors)
        year = min(2024, author.birth_year + self._int(20, 70))
        self.docs.append(Doc(f"book{i:04d}", title, (
            f"{title} is {_a(self._choice(_BOOK_GENRES))} novel written by {author.name}, first published in {year}. "
            f"It has {self._int(8, 60)} chapters.")))
        return title, author

    # ---- questions ---------------------------------------------------------------------------------------------------
    def _questions(self, city_country, companies, films, books) -> list[Question]:
        qs: list[Question] = []
        for i, (film, d) in enumerate(films):
            qs.append(Question(f"film-director-city/{i}", f"In which city was the director of {film} born?", (d.city,),
                               (film, d.name), "film-director-city",
                               (f"{film} was directed by {d.name}", f"{d.name} was born in {d.city}")))
        for i, (book, a) in enumerate(books):
            qs.append(Question(f"book-author-year/{i}", f"In what year was the author of {book} born?",
                               (str(a.birth_year),), (book, a.name), "book-author-year",
                               (f"{book} was written by {a.name}", f"{a.name} was born in {a.birth_year}")))
        for i, c in enumerate(companies):
            country = city_country[c.city]
            qs.append(Question(f"company-hq-country/{i}", f"In which country is the headquarters of {c.name}?",
                               (country,), (c.name, c.city), "company-hq-country",
                               (f"{c.name} is headquartered in {c.city}", f"{c.city} is a city in {country}")))
            qs.append(Question(f"company-founder-year/{i}", f"In what year was the founder of {c.name} born?",
                               (str(c.founder.birth_year),), (c.name, c.founder.name), "company-founder-year",
                               (f"{c.name} was founded by {c.founder.name}",
                                f"{c.founder.name} was born in {c.founder.birth_year}")))
        order = [int(i) for i in self.rng.permutation(len(companies))]
        for k in range(0, len(order) - 1, 2):
            a, b = companies[order[k]], companies[order[k + 1]]
            if a.year == b.year:
                continue  # no earlier one
            first = a if a.year < b.year else b
            qs.append(Question(f"company-founded-earlier/{k // 2}",
                               f"Which company was founded earlier, {a.name} or {b.name}?", (first.name,),
                               (a.name, b.name), "company-founded-earlier",
                               (f"{a.name} was founded in {a.year}", f"{b.name} was founded in {b.year}")))
        # mixed templates in "file order", so that consecutive episode seeds see different kinds of question
        return [qs[int(i)] for i in self.rng.permutation(len(qs))]
