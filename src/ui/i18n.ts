/**
 * The page's words in English, Spanish and French, and which of them a request gets:
 * `ui.language`, else the browser's Accept-Language, else English. Code names (X3, NS) come
 * from the code lists (src/milestones/codes.ts), in Spanish and French from code-names.ts.
 */
export type Lang = 'en' | 'es' | 'fr';
export const LANGS: readonly Lang[] = ['en', 'es', 'fr'];

const en = {
  title: "Driver's page",
  pin: 'PIN',
  logIn: 'Log in',
  logOut: 'Log out',
  wrongPin: 'Wrong PIN.',
  locked: 'Too many wrong PINs from this device: try again in {min} min.',
  slowed: 'Many wrong PINs were tried on this page lately: try again in {wait}.',
  online: 'Online',
  offline: 'Waiting for coverage since {time}',
  waiting: '{n} waiting',
  lastDelivery: 'last delivery {time}',
  never: 'never',
  noLoads: 'No active load.',
  load: 'Load',
  nextStop: 'Next stop',
  noStop: 'No stop left.',
  appointment: 'Appointment',
  truck: 'Truck',
  near: 'near {place}, {ago}',
  at: 'at {lat}, {lon}, {ago}',
  noFix: 'no position yet',
  ago: '{n} min ago',
  justNow: 'just now',
  hoursAgo: '{n} h ago',
  arrived: 'Arrived',
  departed: 'Departed',
  delay: 'Report a delay',
  setAppointment: 'Set appointment',
  reason: 'Reason',
  happenedAt: 'It happened at (local time of the stop; empty: now)',
  appointmentAt: 'Appointment time (local time of the stop)',
  happenedAtZone: 'It happened at (local time of the stop, {zone}; empty: now)',
  appointmentAtZone: 'Appointment time (local time of the stop, {zone})',
  confirm: 'Confirm',
  cancel: 'Cancel',
  saved: 'Saved: {what}.',
  already: 'Already recorded at {time}: one per stop. Nothing new was saved.',
  timeTooOld: 'That time is {days} days ago: the page takes times up to {max} days back. Check the date; an older correction goes through dispatch.',
  timeBeforeFloor: 'Check the year: that date is before any load.',
  timeTooFarAhead: 'Check the year: an appointment is not more than a year ahead.',
  timeAhead: 'That time is still to come: give the time it happened, or leave it empty for now.',
  timeForm: 'The time was not understood: give the date and the time, such as 2026-11-23T10:00.',
  timeNoZone: "Nothing tells this stop's time zone yet (the stop has no place, the truck no position): leave the time empty to record it as of now.",
  timeNoZoneAppointment: "Nothing tells this stop's time zone yet (the stop has no place, the truck no position): try again once the truck has a position.",
  sessionEnded: 'Your session ended, and this was not saved: log in, then record it again.',
  loadGone: 'Load {load} is no longer active: nothing was saved.',
  recent: 'Last milestones',
  none: 'None yet.',
  stateWaiting: 'waiting',
  stateDelivered: 'delivered',
  stateRefused: 'refused: {reason}',
  stop: 'stop {n}',
  pickup: 'pick-up',
  delivery: 'delivery',
  other: 'stop',
  badRequest: 'The form was refused (it came from another page, or too late): reload the page and try again.',
  themeSun: 'High contrast (sunlight)',
  themeNormal: 'Normal contrast',
  appointmentNeedsTime: 'An appointment needs its time: give the date and the time.',
  chooseReason: 'Choose the reason of the delay.',
  noSuchStop: 'Load {load} has no stop {stop} (its stops: {stops}): reload the page.',
  unknownAction: 'The page does not know this button: reload the page and try again.',
  refusedBySettings: "This agent's settings refuse this milestone: nothing was saved. Tell dispatch.",
  warnClockTwice: '{text} happens twice in {zone} (the clocks go back an hour that night): it was recorded as the first, {readAs}. If you meant the second ({second}), tell dispatch.',
  warnClockSkipped: '{text} does not exist in {zone} (the clocks go forward an hour that night): it was recorded as {readAs}. If you meant another time, tell dispatch.',
  warnOffset: "{text} has the offset {offset}, but the place's time zone ({zone}) is at {placeOffset} then: it was recorded as the same moment there, {sentAs}. If you meant {wall} there, tell dispatch.",
  warnReadInFixZone: "{text} was read in the time zone of the truck's last position ({zone}); the truck was in {thenZone} at that time, so the same moment is sent in {thenZone} time.",
  warnNoPosition: 'Recorded without a position (neither the stop nor the truck has one for that time): its time is sent in {zone} time.',
  warnFillsIn: " The agent adds the truck's position when it sends it, if it has one by then.",
  warnOther: 'Saved with a note for dispatch ({kind}).',
};
type Words = typeof en;

const es: Words = {
  title: 'Página del conductor',
  pin: 'PIN',
  logIn: 'Entrar',
  logOut: 'Salir',
  wrongPin: 'PIN incorrecto.',
  locked: 'Demasiados PIN incorrectos desde este dispositivo: vuelva a intentarlo en {min} min.',
  slowed: 'Se han probado muchos PIN incorrectos en esta página últimamente: vuelva a intentarlo en {wait}.',
  online: 'En línea',
  offline: 'Esperando cobertura desde las {time}',
  waiting: '{n} en espera',
  lastDelivery: 'última entrega {time}',
  never: 'nunca',
  noLoads: 'Ninguna carga activa.',
  load: 'Carga',
  nextStop: 'Próxima parada',
  noStop: 'No quedan paradas.',
  appointment: 'Cita',
  truck: 'Camión',
  near: 'cerca de {place}, {ago}',
  at: 'en {lat}, {lon}, {ago}',
  noFix: 'sin posición todavía',
  ago: 'hace {n} min',
  justNow: 'ahora mismo',
  hoursAgo: 'hace {n} h',
  arrived: 'Llegué',
  departed: 'Salí',
  delay: 'Avisar de un retraso',
  setAppointment: 'Fijar cita',
  reason: 'Motivo',
  happenedAt: 'Ocurrió a las (hora local de la parada; vacío: ahora)',
  appointmentAt: 'Hora de la cita (hora local de la parada)',
  happenedAtZone: 'Ocurrió a las (hora local de la parada, {zone}; vacío: ahora)',
  appointmentAtZone: 'Hora de la cita (hora local de la parada, {zone})',
  confirm: 'Confirmar',
  cancel: 'Cancelar',
  saved: 'Guardado: {what}.',
  already: 'Ya registrado a las {time}: uno por parada. No se guardó nada nuevo.',
  timeTooOld: 'Esa hora es de hace {days} días: la página acepta horas de hasta {max} días atrás. Revise la fecha; una corrección más antigua pasa por el despacho.',
  timeBeforeFloor: 'Revise el año: esa fecha es anterior a cualquier carga.',
  timeTooFarAhead: 'Revise el año: una cita no está a más de un año.',
  timeAhead: 'Esa hora todavía no ha llegado: indique la hora en que ocurrió, o déjela vacía para ahora.',
  timeForm: 'No se entendió la hora: indique la fecha y la hora, como 2026-11-23T10:00.',
  timeNoZone: 'Todavía nada indica la zona horaria de esta parada (la parada no tiene lugar, el camión no tiene posición): deje la hora vacía para registrarlo como de ahora.',
  timeNoZoneAppointment: 'Todavía nada indica la zona horaria de esta parada (la parada no tiene lugar, el camión no tiene posición): inténtelo de nuevo cuando el camión tenga posición.',
  sessionEnded: 'Su sesión terminó y esto no se guardó: entre de nuevo y vuelva a registrarlo.',
  loadGone: 'La carga {load} ya no está activa: no se guardó nada.',
  recent: 'Últimos hitos',
  none: 'Ninguno todavía.',
  stateWaiting: 'en espera',
  stateDelivered: 'entregado',
  stateRefused: 'rechazado: {reason}',
  stop: 'parada {n}',
  pickup: 'recogida',
  delivery: 'entrega',
  other: 'parada',
  badRequest: 'El formulario fue rechazado (vino de otra página, o demasiado tarde): recargue la página e inténtelo de nuevo.',
  themeSun: 'Alto contraste (sol)',
  themeNormal: 'Contraste normal',
  appointmentNeedsTime: 'Una cita necesita su hora: indique la fecha y la hora.',
  chooseReason: 'Elija el motivo del retraso.',
  noSuchStop: 'La carga {load} no tiene parada {stop} (sus paradas: {stops}): recargue la página.',
  unknownAction: 'La página no conoce este botón: recargue la página e inténtelo de nuevo.',
  refusedBySettings: 'La configuración de este agente rechaza este hito: no se guardó nada. Avise al despacho.',
  warnClockTwice: '{text} ocurre dos veces en {zone} (esa noche los relojes se atrasan una hora): se registró como la primera, {readAs}. Si quería decir la segunda ({second}), avise al despacho.',
  warnClockSkipped: '{text} no existe en {zone} (esa noche los relojes se adelantan una hora): se registró como {readAs}. Si quería decir otra hora, avise al despacho.',
  warnOffset:
    '{text} lleva el desfase {offset}, pero la zona horaria del lugar ({zone}) está en {placeOffset} a esa hora: se registró como el mismo instante allí, {sentAs}. Si quería decir las {wall} allí, avise al despacho.',
  warnReadInFixZone: '{text} se leyó en la zona horaria de la última posición del camión ({zone}); a esa hora el camión estaba en {thenZone}, así que el mismo instante se envía en la hora de {thenZone}.',
  warnNoPosition: 'Registrado sin posición (ni la parada ni el camión tienen una para esa hora): su hora se envía en la hora de {zone}.',
  warnFillsIn: ' El agente añade la posición del camión al enviarlo, si para entonces tiene una.',
  warnOther: 'Guardado con una nota para el despacho ({kind}).',
};

const fr: Words = {
  title: 'Page du conducteur',
  pin: 'Code PIN',
  logIn: 'Entrer',
  logOut: 'Sortir',
  wrongPin: 'Code PIN erroné.',
  locked: 'Trop de codes erronés depuis cet appareil : réessayez dans {min} min.',
  slowed: 'Beaucoup de codes erronés ont été essayés sur cette page ces derniers temps : réessayez dans {wait}.',
  online: 'En ligne',
  offline: 'En attente de réseau depuis {time}',
  waiting: '{n} en attente',
  lastDelivery: 'dernier envoi {time}',
  never: 'jamais',
  noLoads: 'Aucun chargement actif.',
  load: 'Chargement',
  nextStop: 'Prochain arrêt',
  noStop: 'Plus aucun arrêt.',
  appointment: 'Rendez-vous',
  truck: 'Camion',
  near: 'près de {place}, {ago}',
  at: 'à {lat}, {lon}, {ago}',
  noFix: 'pas encore de position',
  ago: 'il y a {n} min',
  justNow: "à l'instant",
  hoursAgo: 'il y a {n} h',
  arrived: 'Arrivé',
  departed: 'Parti',
  delay: 'Signaler un retard',
  setAppointment: 'Fixer le rendez-vous',
  reason: 'Motif',
  happenedAt: "C'est arrivé à (heure locale de l'arrêt ; vide : maintenant)",
  appointmentAt: "Heure du rendez-vous (heure locale de l'arrêt)",
  happenedAtZone: "C'est arrivé à (heure locale de l'arrêt, {zone} ; vide : maintenant)",
  appointmentAtZone: "Heure du rendez-vous (heure locale de l'arrêt, {zone})",
  confirm: 'Confirmer',
  cancel: 'Annuler',
  saved: 'Enregistré : {what}.',
  already: 'Déjà enregistré à {time} : un par arrêt. Rien de nouveau n’a été enregistré.',
  timeTooOld: 'Cette heure date d’il y a {days} jours : la page accepte des heures jusqu’à {max} jours en arrière. Vérifiez la date ; une correction plus ancienne passe par l’exploitation.',
  timeBeforeFloor: 'Vérifiez l’année : cette date est antérieure à tout chargement.',
  timeTooFarAhead: 'Vérifiez l’année : un rendez-vous n’est pas à plus d’un an.',
  timeAhead: 'Cette heure n’est pas encore arrivée : indiquez l’heure où c’est arrivé, ou laissez vide pour maintenant.',
  timeForm: 'L’heure n’a pas été comprise : indiquez la date et l’heure, par exemple 2026-11-23T10:00.',
  timeNoZone: 'Rien n’indique encore le fuseau horaire de cet arrêt (l’arrêt n’a pas de lieu, le camion pas de position) : laissez l’heure vide pour l’enregistrer à maintenant.',
  timeNoZoneAppointment: 'Rien n’indique encore le fuseau horaire de cet arrêt (l’arrêt n’a pas de lieu, le camion pas de position) : réessayez quand le camion aura une position.',
  sessionEnded: 'Votre session a pris fin et ceci n’a pas été enregistré : entrez de nouveau, puis enregistrez-le encore.',
  loadGone: 'Le chargement {load} n’est plus actif : rien n’a été enregistré.',
  recent: 'Derniers jalons',
  none: 'Aucun pour le moment.',
  stateWaiting: 'en attente',
  stateDelivered: 'livré',
  stateRefused: 'refusé : {reason}',
  stop: 'arrêt {n}',
  pickup: 'chargement',
  delivery: 'livraison',
  other: 'arrêt',
  badRequest: 'Le formulaire a été refusé (il venait d’une autre page, ou trop tard) : rechargez la page et réessayez.',
  themeSun: 'Contraste élevé (plein soleil)',
  themeNormal: 'Contraste normal',
  appointmentNeedsTime: 'Un rendez-vous a besoin de son heure : indiquez la date et l’heure.',
  chooseReason: 'Choisissez le motif du retard.',
  noSuchStop: 'Le chargement {load} n’a pas d’arrêt {stop} (ses arrêts : {stops}) : rechargez la page.',
  unknownAction: 'La page ne connaît pas ce bouton : rechargez la page et réessayez.',
  refusedBySettings: 'Les réglages de cet agent refusent ce jalon : rien n’a été enregistré. Prévenez l’exploitation.',
  warnClockTwice:
    '{text} existe deux fois dans le fuseau {zone} (les horloges reculent d’une heure cette nuit-là) : enregistré comme la première, {readAs}. Si vous vouliez dire la seconde ({second}), prévenez l’exploitation.',
  warnClockSkipped: '{text} n’existe pas dans le fuseau {zone} (les horloges avancent d’une heure cette nuit-là) : enregistré comme {readAs}. Si vous vouliez dire une autre heure, prévenez l’exploitation.',
  warnOffset:
    '{text} porte le décalage {offset}, mais le fuseau du lieu ({zone}) est à {placeOffset} à ce moment : enregistré comme le même instant là-bas, {sentAs}. Si vous vouliez dire {wall} là-bas, prévenez l’exploitation.',
  warnReadInFixZone:
    '{text} a été lu dans le fuseau de la dernière position du camion ({zone}) ; à ce moment le camion était dans le fuseau {thenZone}, donc le même instant est envoyé à l’heure de {thenZone}.',
  warnNoPosition: 'Enregistré sans position (ni l’arrêt ni le camion n’en a une pour cette heure) : son heure est envoyée à l’heure de {zone}.',
  warnFillsIn: ' L’agent ajoute la position du camion à l’envoi, s’il en a une d’ici là.',
  warnOther: 'Enregistré avec une note pour l’exploitation ({kind}).',
};

const WORDS: Record<Lang, Words> = { en, es, fr };
export type Key = keyof Words;

/** The words of `lang`, with `{name}` filled in from `vars`. */
export function translator(lang: Lang): (key: Key, vars?: Record<string, string | number>) => string {
  const w = WORDS[lang];
  return (key, vars) => w[key].replace(/\{(\w+)\}/g, (_, k: string) => String(vars?.[k] ?? `{${k}}`));
}

/** A wait as a driver reads it, rounded up: "40 s", "3 min", "2 h" (the same in the three languages). */
export function waitWords(ms: number): string {
  const s = Math.ceil(ms / 1000);
  if (s < 90) return `${s} s`;
  if (s < 90 * 60) return `${Math.ceil(s / 60)} min`;
  return `${Math.ceil(s / 3600)} h`;
}

/** `ui.language` if set, else the first of Accept-Language's languages the page has (by q), else en. */
export function pickLanguage(configured: Lang | undefined, acceptLanguage: string | undefined): Lang {
  if (configured) return configured;
  const wanted = (acceptLanguage ?? '')
    .split(',')
    .map((part, i) => {
      const [tag, ...params] = part.trim().toLowerCase().split(';');
      const q = params.map((p) => /^\s*q=([\d.]+)/.exec(p)?.[1]).find(Boolean);
      return { lang: tag.split('-')[0], q: q === undefined ? 1 : Number(q), i };
    })
    .filter((x) => x.q > 0)
    .sort((a, b) => b.q - a.q || a.i - b.i);
  return (wanted.find((x) => (LANGS as readonly string[]).includes(x.lang))?.lang as Lang | undefined) ?? 'en';
}
